"""One job: its search, stages, fusion report, ablation, validation, benchmarks, engine layers,
events, artifacts and error, each chart with its numbers in a table beside it.

The page reads the job document the API answers (api/schemas/jobs.py JobRead) and nothing
else; this module turns it into what the template draws. The ablation (the fusion study's
cumulative stages) is the job's benchmarks of suite "ablation"; the original-vs-engine timings
are those of suite "comparison".
"""

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from core import svg_charts as charts
from core.db.models import BenchmarkSuite, BenchmarkVariant
from core.svg_charts import Segment, Series, format_cosine
from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["CANCELLABLE", "JobView", "comparison_benchmarks", "job_view", "router"]

router = APIRouter()

CANCELLABLE = frozenset({"queued", "running"})
PERCENTILES = (("p50", "latency_ms_p50"), ("p90", "latency_ms_p90"), ("p99", "latency_ms_p99"),
               ("mean", "latency_ms_mean"))
BUILD_LOG = "build.log"


@dataclass
class JobView:
    """What the template shows beyond the job document itself."""

    cancellable: bool
    timeline: Markup
    segments: list[Segment]
    stage_totals: list[tuple[str, float]]
    stage_peaks: Mapping[str, float] = field(default_factory=dict)  # MiB, per stage
    op_chart: Markup | None = None
    op_rows: list[tuple[str, int, int]] = field(default_factory=list)
    rules_applied: list[Mapping[str, Any]] = field(default_factory=list)
    near_misses: list[dict[str, str]] = field(default_factory=list)
    ablation: list[Mapping[str, Any]] = field(default_factory=list)
    ablation_chart: Markup | None = None
    comparison: list[Mapping[str, Any]] = field(default_factory=list)
    latency_chart: Markup | None = None
    throughput_chart: Markup | None = None
    headline: Mapping[str, Any] | None = None  # the engine's comparison record
    sweep: list[Mapping[str, Any]] = field(default_factory=list)
    sweep_latency_chart: Markup | None = None
    sweep_throughput_chart: Markup | None = None
    localization: Mapping[str, Any] | None = None
    build_log: Mapping[str, Any] | None = None
    quantization_time_chart: Markup | None = None  # int8: each candidate's time over fp32's
    quantization_nodes_chart: Markup | None = None  # int8: the engine's nodes by precision
    profile_chart: Markup | None = None  # time by op type, original and engine
    search_chart: Markup | None = None  # search jobs: the raced candidates, latency by cosine


@router.get("/ui/jobs/{job_id}")
async def job_page(request: Request, browser: BrowserDep, job_id: uuid.UUID) -> HTMLResponse:
    job = await browser.api.get(f"/v1/jobs/{job_id}")
    return render(request, browser, "job_detail.html", active="jobs", job=job,
                  model_name=job["model_name"],
                  view=job_view(job, now=datetime.now(UTC)), num=charts.format_number,
                  cosine=format_cosine)


def job_view(job: Mapping[str, Any], *, now: datetime) -> JobView:
    """The charts and tables of `job` (a JobRead document); `now` ends a running stage."""
    segments, totals = stage_timeline(job, now=now)
    view = JobView(
        cancellable=job["status"] in CANCELLABLE,
        timeline=charts.stage_timeline("stages", "Time spent in each stage", segments),
        segments=segments,
        stage_totals=totals,
        stage_peaks=(job.get("stage_memory") or {}).get("peak_rss_mb") or {},
        localization=(job.get("accuracy_report") or {}).get("localization"),
        build_log=next((a for a in job.get("artifacts", []) if a["name"] == BUILD_LOG), None),
    )
    _fusion(view, job.get("fusion_report"))
    _quantization(view, (job.get("accuracy_report") or {}).get("quantization"))
    _profile(view, job.get("profile_report"))
    _search(view, job.get("search_report"))
    benchmarks = job.get("benchmarks", [])
    view.ablation = [b for b in benchmarks if b["suite"] == BenchmarkSuite.ABLATION]
    if view.ablation:
        view.ablation_chart = charts.bar_chart(
            "ablation", "Median latency of each cumulative fusion stage",
            [(b["variant"], b["latency_ms_p50"]) for b in view.ablation],
            unit="ms", axis_label="median latency (ms)", vertical=True)
    view.comparison = comparison_benchmarks(benchmarks)
    if view.comparison:
        view.latency_chart = latency_chart("latency", view.comparison)
        view.throughput_chart = charts.bar_chart(
            "throughput", "Throughput, original model and engine",
            [(_variant_label(b), b["throughput_per_s"]) for b in view.comparison],
            unit="/s", axis_label="samples per second")
        view.headline = next((b for b in view.comparison if b["variant"] == BenchmarkVariant.ENGINE),
                             None)
    _sweep(view, benchmarks)
    return view


def _quantization(view: JobView, report: Mapping[str, Any] | None) -> None:
    """An int8 job's charts: the candidates' time relative to fp32, the nodes by precision."""
    if not report:
        return
    timed = [(c["label"], c["speed"]["ratio"]) for c in report.get("tried") or []
             if c.get("speed")]
    if timed:
        view.quantization_time_chart = charts.bar_chart(
            "int8-time", "Each int8 candidate's time over the fp32 model's (median ratio)",
            [("fp32", 1.0), *timed], axis_label="time / fp32 time")
    counts = (report.get("node_precisions") or {}).get("node_counts") or {}
    if counts:
        view.quantization_nodes_chart = charts.bar_chart(
            "int8-nodes", "Nodes of the fused model by the precision the engine runs them at",
            sorted(counts.items()), axis_label="nodes")


def _sweep(view: JobView, benchmarks: Sequence[Mapping[str, Any]]) -> None:
    """Original and engine per batch size (suite "sweep"): where the engine's lead grows or
    vanishes."""
    view.sweep = sorted((b for b in benchmarks if b["suite"] == BenchmarkSuite.SWEEP),
                        key=lambda b: (b["batch_size"], b["variant"] != BenchmarkVariant.ORIGINAL))
    if not view.sweep:
        return
    sizes = sorted({b["batch_size"] for b in view.sweep})
    by_key = {(b["variant"], b["batch_size"]): b for b in view.sweep}
    variants = list(dict.fromkeys(b["variant"] for b in view.sweep))

    def series(key: str) -> list[Series]:
        return [Series(v, [by_key[(v, n)][key] if (v, n) in by_key else None for n in sizes])
                for v in variants]

    view.sweep_latency_chart = charts.line_chart(
        "sweep-latency", "Median latency per batch size", sizes, series("latency_ms_p50"),
        unit="ms", x_label="batch size", axis_label="median latency (ms)")
    view.sweep_throughput_chart = charts.line_chart(
        "sweep-throughput", "Throughput per batch size", sizes, series("throughput_per_s"),
        unit="/s", x_label="batch size", axis_label="samples per second")


def stage_timeline(job: Mapping[str, Any], *, now: datetime
                   ) -> tuple[list[Segment], list[tuple[str, float]]]:
    """The job's stages as timeline segments (seconds since it was created), and the total
    time of each stage (the document's `stage_seconds`: a stage entered again by a fallback
    counts once, both rounds summed).

    A stage lasts from its "stage <name> started" event until the next one starts, the last
    until the job finished (`now` while it runs); the wait before a worker claimed the job is
    the first segment.
    """
    created = _at(job["created_at"])
    if created is None:
        return [], []
    end = _at(job.get("finished_at")) or now
    starts: list[tuple[str, datetime, str]] = []
    for event in job.get("events", []):
        stage, message = event.get("stage"), event.get("message", "")
        opening = f"stage {stage} started"
        at = _at(event.get("created_at"))
        if stage and at is not None and message.startswith(opening):
            starts.append((stage, at, message[len(opening):].strip().removeprefix("(")
                           .removesuffix(")")))
    segments = []
    claimed = _at(job.get("started_at")) or (starts[0][1] if starts else end)
    if claimed > created:
        waiting = "still waiting" if job["status"] == "queued" else ""
        segments.append(Segment("queued", 0.0, _seconds(created, claimed), waiting))
    ends = [at for _, at, _ in starts[1:]] + [end] if starts else []
    running = job["status"] in CANCELLABLE
    for index, ((stage, at, note), ended) in enumerate(zip(starts, ends, strict=True)):
        if running and index == len(starts) - 1:
            note = "; ".join(part for part in (note, "in progress") if part)
        segments.append(Segment(stage, _seconds(created, at), _seconds(at, ended), note))
    return segments, list(job.get("stage_seconds", {}).items())


def _fusion(view: JobView, report: Mapping[str, Any] | None) -> None:
    if not report:
        return
    before, after = report.get("ops_before", {}), report.get("ops_after", {})
    ops = sorted(set(before) | set(after), key=lambda op: (-before.get(op, 0), -after.get(op, 0), op))
    view.op_rows = [(op, int(before.get(op, 0)), int(after.get(op, 0))) for op in ops]
    view.op_chart = charts.grouped_bar_chart(
        "op-histogram", "Operators by type, before and after fusion", ops,
        [Series("before", [float(b) for _, b, _ in view.op_rows]),
         Series("after", [float(a) for _, _, a in view.op_rows])],
        axis_label="number of nodes")
    rules = report.get("rules", [])
    view.rules_applied = [rule for rule in rules if rule.get("applied")]
    view.near_misses = [
        {"pass_name": rule["pass_name"], "rule": rule["rule"], "node": refusal.get("node", ""),
         "reason": refusal.get("reason", "")}
        for rule in rules for refusal in rule.get("refusals", [])]


_PROFILE_OP_TYPES = 12  # op types charted; the table beside it lists them all


def _profile(view: JobView, report: Mapping[str, Any] | None) -> None:
    rows = (report or {}).get("by_op_type") or []
    if not rows:
        return
    shown = rows[:_PROFILE_OP_TYPES]
    view.profile_chart = charts.grouped_bar_chart(
        "profile-op-types", "Time by op type, original and engine (ONNX Runtime's profiler)",
        [row["op_type"] for row in shown],
        [Series("original", [row["original_ms"] for row in shown]),
         Series("engine", [row["engine_ms"] for row in shown])],
        unit="ms", axis_label="milliseconds per run")


def _search(view: JobView, report: Mapping[str, Any] | None) -> None:
    """A search job's scatter of its raced candidates; none when the race timed none (every
    candidate refused, failed or out of a budget: the table says which and why)."""
    rows = (report or {}).get("rows") or []
    if any(row.get("latency_ms_p50") is not None for row in rows):
        view.search_chart = charts.search_scatter(rows)


def comparison_benchmarks(benchmarks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The original-vs-engine timings, by batch size then with the original first."""
    rows = [b for b in benchmarks
            if b.get("suite", BenchmarkSuite.COMPARISON) == BenchmarkSuite.COMPARISON]
    return sorted(rows, key=lambda b: (b["batch_size"], b["variant"] != BenchmarkVariant.ORIGINAL,
                                       b["variant"]))


def latency_chart(name: str, rows: Sequence[Mapping[str, Any]]) -> Markup:
    """Latency percentiles as grouped bars: one series per variant (original, engine), one
    group per percentile (and per batch size when several were timed)."""
    batch_sizes = sorted({b["batch_size"] for b in rows})
    several = len(batch_sizes) > 1
    categories = [f"{label} (batch {size})" if several else label
                  for size in batch_sizes for label, _ in PERCENTILES]
    variants = list(dict.fromkeys(b["variant"] for b in rows))
    by_key = {(b["variant"], b["batch_size"]): b for b in rows}
    series = []
    for variant in variants:
        values: list[float | None] = []
        for size in batch_sizes:
            row = by_key.get((variant, size))
            values += [row[key] if row else None for _, key in PERCENTILES]
        series.append(Series(variant, values))
    return charts.grouped_bar_chart(name, "Latency percentiles, original model and engine",
                                    categories, series, unit="ms", axis_label="latency (ms)")


def _variant_label(row: Mapping[str, Any]) -> str:
    return f"{row['variant']} (batch {row['batch_size']})"


def _at(value: str | None) -> datetime | None:
    if not value:
        return None
    at = datetime.fromisoformat(value)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _seconds(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds(), 0.0)
