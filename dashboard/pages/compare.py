"""Compare: jobs of one model side by side (timings, accuracy, fusion), to pick the engine to
ship; without jobs, a picker: the project's models, then one model's jobs to tick.

Jobs of different models are refused: their latencies and errors measure different graphs.
"""

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from core import svg_charts as charts
from core.db.models import BenchmarkVariant
from core.svg_charts import Series, format_cosine
from dashboard.pages.job_detail import comparison_benchmarks
from dashboard.signed_in import Browser, BrowserDep
from dashboard.templating import render

__all__ = ["Cell", "Row", "comparison_rows", "router"]

router = APIRouter()

MAX_JOBS = 20
Job = Mapping[str, Any]
Better = Literal["lower", "higher"] | None


@dataclass(frozen=True)
class Cell:
    text: str
    best: bool = False


@dataclass(frozen=True)
class Row:
    label: str
    cells: list[Cell]
    better: Better = None


@dataclass(frozen=True)
class _Metric:
    label: str
    value: Callable[[Job], Any]  # a number, a string, or None (not recorded)
    better: Better = None
    unit: str = ""
    optional: bool = False  # left out when no job has a value
    show: Callable[[float], str] | None = None  # how a number reads (default: 3 digits, unit)


@router.get("/ui/compare")
async def compare_page(request: Request, browser: BrowserDep,
                       job: Annotated[list[str] | None, Query()] = None,
                       model: Annotated[str | None, Query(max_length=64)] = None) -> HTMLResponse:
    if job:
        return await _comparison(request, browser, job)
    if model:
        model_id = _uuid(model)
        if model_id is None:
            return _refuse(request, browser, f"'{model}' is not a model id.")
        return render(request, browser, "compare.html", active="compare", mode="pick",
                      model=await browser.api.get(f"/v1/models/{model_id}"),
                      jobs=(await browser.api.get("/v1/jobs", {"model_id": str(model_id),
                                                               "limit": 50}))["items"])
    return render(request, browser, "compare.html", active="compare", mode="models",
                  models=(await browser.api.get("/v1/models", {"limit": 50}))["items"])


async def _comparison(request: Request, browser: Browser, raw_ids: Sequence[str]) -> HTMLResponse:
    ids = list(dict.fromkeys(raw_ids))
    if len(ids) > MAX_JOBS:
        return _refuse(request, browser, f"{len(ids)} jobs were picked; compare at most "
                       f"{MAX_JOBS} at a time.")
    bad = [raw for raw in ids if _uuid(raw) is None]
    if bad:
        return _refuse(request, browser, f"{', '.join(repr(b) for b in bad)} is not a job id; "
                       "pick the jobs from a model's list.")
    jobs = [await browser.api.get(f"/v1/jobs/{job_id}") for job_id in ids]
    model_ids = list(dict.fromkeys(j["model_id"] for j in jobs))
    models = {model_id: await browser.api.get(f"/v1/models/{model_id}") for model_id in model_ids}
    if len(model_ids) > 1:
        counts = ", ".join(
            f"{models[m]['name']} ({sum(j['model_id'] == m for j in jobs)} job(s))"
            for m in model_ids)
        return _refuse(request, browser,
                       f"These jobs optimize different models: {counts}. Their timings and "
                       "errors measure different graphs; compare jobs of one model.",
                       models=[models[m] for m in model_ids])
    return render(request, browser, "compare.html", active="compare", mode="compare",
                  jobs=jobs, model=models[model_ids[0]], rows=comparison_rows(jobs),
                  chart=latency_chart(jobs), labels=[job_label(j) for j in jobs])


def _refuse(request: Request, browser: Browser, message: str,
            models: Sequence[Mapping[str, Any]] = ()) -> HTMLResponse:
    return render(request, browser, "compare.html", status_code=422, active="compare",
                  mode="refused", refusal=message, models=models)


def _uuid(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def job_label(job: Job) -> str:
    config = job.get("config") or {}
    return f"{job['id'][:8]} · {config.get('backend', '?')} {config.get('precision', '')}".strip()


def _engine(job: Job) -> Job | None:
    """The job's engine timing (its smallest batch size), None when not benchmarked."""
    rows = [b for b in comparison_benchmarks(job.get("benchmarks", []))
            if b["variant"] == BenchmarkVariant.ENGINE]
    return rows[0] if rows else None


def _bench(key: str, variant: str = BenchmarkVariant.ENGINE) -> Callable[[Job], Any]:
    def read(job: Job) -> Any:
        rows = [b for b in comparison_benchmarks(job.get("benchmarks", []))
                if b["variant"] == variant]
        return rows[0].get(key) if rows else None
    return read


def _outputs(job: Job) -> list[Mapping[str, Any]]:
    return list((job.get("validation") or {}).get("outputs", []))


def _worst(key: str, pick: Callable[[list[float]], float]) -> Callable[[Job], Any]:
    def read(job: Job) -> Any:
        values = [o[key] for o in _outputs(job) if o.get(key) is not None]
        return pick(values) if values else None
    return read


def _verdict(job: Job) -> str | None:
    validation = job.get("validation")
    if not validation:
        return None
    failed = [o["name"] for o in validation.get("outputs", []) if not o.get("passed")]
    return "passed" if validation.get("passed") else "failed" + (f" ({', '.join(failed)})" if failed else "")


def _passes(job: Job) -> str:
    passes = (job.get("config") or {}).get("passes", "all")
    return passes if isinstance(passes, str) else ", ".join(passes) or "none"


def _fusion(key: str) -> Callable[[Job], Any]:
    return lambda job: (job.get("fusion_report") or {}).get(key)


def _rewrites(job: Job) -> int | None:
    report = job.get("fusion_report")
    return None if not report else sum(rule.get("applied", 0) for rule in report.get("rules", []))


def _fused_ops(job: Job) -> str | None:
    """Op types the fusion introduced, with their counts (e.g. "com.microsoft.FusedConv × 2")."""
    report = job.get("fusion_report")
    if not report:
        return None
    before = report.get("ops_before", {})
    new = {op: n for op, n in report.get("ops_after", {}).items() if op not in before}
    return ", ".join(f"{op} × {n}" for op, n in sorted(new.items())) or "none"


METRICS: tuple[_Metric, ...] = (
    _Metric("Status", lambda j: j["status"]),
    _Metric("Backend", lambda j: (j.get("config") or {}).get("backend")),
    _Metric("Precision", lambda j: (j.get("config") or {}).get("precision")),
    _Metric("Passes", _passes),
    _Metric("Batch size", _bench("batch_size")),
    _Metric("Engine latency p50", _bench("latency_ms_p50"), "lower", "ms"),
    _Metric("Engine latency p90", _bench("latency_ms_p90"), "lower", "ms"),
    _Metric("Engine latency p99", _bench("latency_ms_p99"), "lower", "ms"),
    _Metric("Original model latency p50", _bench("latency_ms_p50", BenchmarkVariant.ORIGINAL), None, "ms"),
    _Metric("Throughput", _bench("throughput_per_s"), "higher", "/s"),
    _Metric("Peak memory", _bench("peak_memory_mb"), "lower", "MB", optional=True),
    _Metric("Device memory", _bench("device_memory_mb"), "lower", "MB", optional=True),
    _Metric("Speed-up vs original", _bench("speedup_vs_reference"), "higher", "×"),
    _Metric("Validation", _verdict),
    _Metric("Worst max abs error", _worst("max_abs_err", max), "lower"),
    _Metric("Worst cosine similarity", _worst("cosine_similarity", min), "higher",
            show=format_cosine),
    _Metric("Nodes before fusion", _fusion("nodes_before")),
    _Metric("Nodes after fusion", _fusion("nodes_after"), "lower"),
    _Metric("Rewrites applied", _rewrites),
    _Metric("Fused ops", _fused_ops),
)


def comparison_rows(jobs: Sequence[Job]) -> list[Row]:
    """One row per metric, one cell per job; where lower or higher is better and two or more
    jobs have a value, the best cells (ties too) are marked."""
    rows = []
    for metric in METRICS:
        values = [metric.value(job) for job in jobs]
        if metric.optional and all(v is None for v in values):
            continue
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        best = None
        if metric.better and len(numbers) >= 2 and min(numbers) != max(numbers):
            best = min(numbers) if metric.better == "lower" else max(numbers)
        rows.append(Row(metric.label, [
            Cell(metric.show(v) if metric.show and v is not None else _text(v, metric.unit),
                 best is not None and v == best)
            for v in values], metric.better))
    return rows


def _text(value: Any, unit: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if unit == "×":
            return f"{value:.2f}×"
        return charts.format_number(float(value), unit)
    return str(value)


def latency_chart(jobs: Sequence[Job]) -> Markup:
    """The engines' latency percentiles, one group per job, one bar per percentile."""
    percentiles = (("p50", "latency_ms_p50"), ("p90", "latency_ms_p90"), ("p99", "latency_ms_p99"))
    engines = [_engine(job) for job in jobs]
    return charts.grouped_bar_chart(
        "compare-latency", "Engine latency percentiles by job", [job_label(j) for j in jobs],
        [Series(name, [e.get(key) if e else None for e in engines]) for name, key in percentiles],
        unit="ms", axis_label="latency (ms)")
