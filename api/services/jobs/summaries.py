"""Job summaries as the job list and the project's job stream show them: the job's row with its
model's name, backend and precision, its headline speed-up (and the engine's regression, if it
was flagged one) and validation verdict.

A page of summaries costs three queries however long it is: the jobs joined to their models
(backend and precision read out of the stored config by the database), then the page's
engine-vs-original speed-ups and validation verdicts, each for all the page's jobs at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, RowMapping, Select, bindparam, case, func, select

from api.schemas.jobs import JobSummary
from core.db.models import (
    BenchmarkRecord,
    BenchmarkSuite,
    BenchmarkVariant,
    Job,
    Model,
    ValidationResult,
)
from core.job_config import JobConfig

__all__ = [
    "BACKEND",
    "SUMMARY_COLUMNS",
    "headline",
    "read_summaries",
    "summary_fields",
    "summary_select",
    "validation_verdict",
]

# The config as stored holds every field; the defaults cover a row written without one.
# A search job's backend and precision are its winner's (the recipe it shipped), once it has one.
BACKEND = func.coalesce(Job.search_report[("recipe", "backend")].as_string(),
                        Job.config["backend"].as_string(),
                        JobConfig.model_fields["backend"].default)
_PRECISION = func.coalesce(Job.search_report[("recipe", "precision")].as_string(),
                           Job.config["precision"].as_string(),
                           JobConfig.model_fields["precision"].default)
SUMMARY_COLUMNS = (Job.id, Job.model_id, Model.name.label("model_name"),
                   BACKEND.label("backend"), _PRECISION.label("precision"), Job.status,
                   Job.stage, Job.progress, Job.error_code, Job.error_message, Job.status_detail,
                   Job.created_at, Job.started_at, Job.finished_at, Job.outcome)

# The headline speed-up is the comparison suite's engine record: the median over the
# interleaved rounds of original latency / engine latency (optimizer.measure.benchmark; on onnxruntime
# "original" runs at ONNX Runtime's default level, not original_unoptimized; sweep records are
# another suite), as fuseforge_client's Job.speedup reads it.
_HEADLINE_SUITE, _HEADLINE_VARIANT = BenchmarkSuite.COMPARISON, BenchmarkVariant.ENGINE
# The headline record's columns a summary shows, and the names it shows them under.
_HEADLINE = {"speedup_vs_reference": "speedup", "speedup_ci_low": "speedup_ci_low",
             "speedup_ci_high": "speedup_ci_high", "speedup_verdict": "speedup_verdict",
             "regression": "regression"}
_SPEEDUPS = (select(BenchmarkRecord.job_id,
                    *(getattr(BenchmarkRecord, column) for column in _HEADLINE))
             .where(BenchmarkRecord.job_id.in_(bindparam("job_ids", expanding=True)),
                    BenchmarkRecord.suite == _HEADLINE_SUITE,
                    BenchmarkRecord.variant == _HEADLINE_VARIANT)
             .order_by(BenchmarkRecord.id))
# 1 when every output passed, 0 when one failed; a job without rows is not validated yet.
_VERDICTS = (select(ValidationResult.job_id,
                    func.min(case((ValidationResult.passed, 1), else_=0)).label("passed"))
             .where(ValidationResult.job_id.in_(bindparam("job_ids", expanding=True)))
             .group_by(ValidationResult.job_id))


def summary_select(*conditions: ColumnElement[bool]) -> Select[Any]:
    """The summary columns of the jobs meeting `conditions`, each joined to its model (order
    and limit are the caller's)."""
    return select(*SUMMARY_COLUMNS).join(Model, Model.id == Job.model_id).where(*conditions)


def read_summaries(connection: Connection, query: Select[Any]) -> list[JobSummary]:
    """The jobs `query` (a `summary_select`) finds, in its order, with their speed-ups and
    verdicts read in one query each."""
    rows = list(connection.execute(query).mappings())
    if not rows:
        return []
    params = {"job_ids": [row["id"] for row in rows]}
    headlines = {record["job_id"]: headline([dict(record)])  # the latest record wins (ordered by id)
                 for record in connection.execute(_SPEEDUPS, params).mappings()}
    verdicts = {job_id: bool(passed) for job_id, passed in connection.execute(_VERDICTS, params)}
    return [JobSummary.model_validate(summary_fields(
        row, headline=headlines.get(row["id"], {}), validation_passed=verdicts.get(row["id"])))
        for row in rows]


def summary_fields(row: RowMapping, *, headline: Mapping[str, Any],
                   validation_passed: bool | None) -> dict[str, Any]:
    """The `JobSummary` fields of a row of `SUMMARY_COLUMNS`."""
    error = ({"code": row["error_code"], "message": row["error_message"] or ""}
             if row["error_code"] is not None else None)
    started, finished = row["started_at"], row["finished_at"]
    return {"id": row["id"], "model_id": row["model_id"], "model_name": row["model_name"],
            "backend": row["backend"], "precision": row["precision"], "status": row["status"],
            "stage": row["stage"], "progress": row["progress"], "error": error,
            "status_detail": row["status_detail"], **headline,
            "validation_passed": validation_passed, "outcome": row["outcome"],
            "created_at": row["created_at"],
            "started_at": started, "finished_at": finished,
            "duration_s": ((finished - started).total_seconds()
                           if started is not None and finished is not None else None)}


def headline(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The headline fields (speed-up, its interval and verdict, regression) of the last
    headline record among a job's records (in id order), as `read_summaries` picks it; empty
    before the job was benchmarked."""
    found: dict[str, Any] = {}
    for record in records:
        if record.get("suite", _HEADLINE_SUITE) == _HEADLINE_SUITE and \
                record.get("variant", _HEADLINE_VARIANT) == _HEADLINE_VARIANT:
            found = {name: record[column] for column, name in _HEADLINE.items()}
    return found


def validation_verdict(outputs: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether every compared output passed; None before validation stored any."""
    return all(o["passed"] for o in outputs) if outputs else None
