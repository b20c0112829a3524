"""A job's static report, `report.html`: one self-contained page (inline CSS and SVG, no
script, no link out but to the engine beside it) for people who never open the dashboard: its
outcome first (the headline, asked against shipped, the verdicts, the download), then, folded,
what a search chose, what fused, how accurate, which precision each node runs at, the
benchmarks, where the time goes, and where it was measured.

Drawn from what the job is about to store (its report columns, validation, benchmark records),
with the dashboard's chart primitives (core/svg_charts.py). Jinja autoescapes every value:
names come from the uploaded model and nothing in a stored page is left to trust.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from core.db.models import BenchmarkRecord, BenchmarkSuite
from core.job_config import JobConfig
from core.svg_charts import Series, format_cosine, format_number, grouped_bar_chart, search_scatter
from worker.pipeline.records.outcome import outcome_column
from worker.pipeline.results import JobOutcome, JobRun, PendingArtifact

__all__ = ["REPORT_FILE", "job_report_html"]

REPORT_FILE = "report.html"
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True, undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
_CHARTED_OP_TYPES = 12


def job_report_html(run: JobRun, outcome: JobOutcome, columns: Mapping[str, Any],
                    records: Sequence[BenchmarkRecord], *,
                    asked: JobConfig | None = None) -> PendingArtifact:
    """Write the report into the run's scratch folder; the artifact to store with the job.
    `columns` are the job's report columns as stored (`report_columns`); `asked` the job's own
    config where `run` carries another (a search's winner's), for the outcome card it opens
    with (the job's `outcome`, as the recorder stores it)."""
    comparison = [_record(r) for r in records if r.suite == BenchmarkSuite.COMPARISON]
    card = outcome_column((asked or run.config).model_dump(mode="json"), outcome, dict(columns))
    engine_file = next((a.name for a in outcome.artifacts.values() if a.kind == "engine"), None)
    profile = columns.get("profile_report") or {}
    fusion = columns.get("fusion_report") or {}
    search = columns.get("search_report") or {}
    page = _TEMPLATES.get_template("report.html").render(
        job_id=str(run.job_id), config=run.config.model_dump(mode="json"),
        written_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        fusion=fusion, accuracy=columns.get("accuracy_report") or {},
        validation=None if outcome.validation is None else outcome.validation.to_dict(),
        comparison=comparison, profile=profile,
        environment=(outcome.benchmark_context.environment
                     if outcome.benchmark_context is not None else {}),
        op_chart=_op_chart(fusion), profile_chart=_profile_chart(profile),
        search=search, search_chart=_search_chart(search), num=format_number,
        cosine=format_cosine, outcome=card, engine_file=engine_file)
    path = run.scratch_dir / REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return PendingArtifact(REPORT_FILE, "report", path)


def _record(record: BenchmarkRecord) -> dict[str, Any]:
    return {column: getattr(record, column) for column in (
        "variant", "batch_size", "latency_ms_p50", "latency_ms_p99", "latency_ms_p50_ci_low",
        "latency_ms_p50_ci_high", "throughput_per_s", "speedup_vs_reference", "speedup_ci_low",
        "speedup_ci_high", "speedup_verdict", "peak_memory_mb", "iterations")}


def _op_chart(fusion: Mapping[str, Any]) -> Markup | None:
    before, after = fusion.get("ops_before") or {}, fusion.get("ops_after") or {}
    ops = sorted(set(before) | set(after), key=lambda op: (-before.get(op, 0), op))
    if not ops:
        return None
    return grouped_bar_chart("op-histogram", "Operators by type, before and after fusion", ops,
                             [Series("before", [float(before.get(op, 0)) for op in ops]),
                              Series("after", [float(after.get(op, 0)) for op in ops])],
                             axis_label="number of nodes")


def _search_chart(search: Mapping[str, Any]) -> Markup | None:
    rows = search.get("rows") or []
    if not any(row.get("latency_ms_p50") is not None for row in rows):
        return None
    return search_scatter(rows)


def _profile_chart(profile: Mapping[str, Any]) -> Markup | None:
    rows = (profile.get("by_op_type") or [])[:_CHARTED_OP_TYPES]
    if not rows:
        return None
    return grouped_bar_chart("profile-op-types", "Time by op type, original and engine",
                             [row["op_type"] for row in rows],
                             [Series("original", [row["original_ms"] for row in rows]),
                              Series("engine", [row["engine_ms"] for row in rows])],
                             unit="ms", axis_label="milliseconds per run")
