"""The body of a job's webhook: the job as JSON, the fields of GET /v1/jobs/{id} that say how
it ended (status, error, config, artifacts and their download paths), with the engine's
headline verdicts: its speed-up's (`speedup_verdict`) and a flagged `regression`, and the job's
`outcome` (what was asked and shipped, and the `headline` every surface prints).

Validation rows, benchmarks, reports and events are left to GET /v1/jobs/{id}: they can run to
megabytes, and a receiver that wants them fetches them once it knows the job ended.
"""

import uuid
from typing import Any

from pydantic_core import to_json
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import (
    Artifact,
    BenchmarkRecord,
    BenchmarkSuite,
    BenchmarkVariant,
    Job,
    JobStatus,
)

__all__ = ["EVENTS", "event_of", "job_payload"]

EVENTS = {
    JobStatus.SUCCEEDED: "job.succeeded",
    JobStatus.FAILED: "job.failed",
    JobStatus.CANCELLED: "job.cancelled",
}


def event_of(status: str) -> str | None:
    """The webhook event of a job in `status`; None while it has not ended."""
    return EVENTS.get(JobStatus(status))


def job_payload(session: Session, job: Job) -> bytes:
    """`job` as the JSON bytes the webhook sends (and signs)."""
    artifacts = session.execute(
        select(Artifact.name, Artifact.kind, Artifact.size_bytes, Artifact.sha256)
        .where(Artifact.job_id == job.id).order_by(Artifact.name)).mappings()
    error = ({"code": job.error_code, "message": job.error_message or ""}
             if job.error_code is not None else None)
    # the comparison suite's engine record, as the job's headline speed-up is read
    engine = session.execute(
        select(BenchmarkRecord.speedup_verdict, BenchmarkRecord.regression)
        .where(BenchmarkRecord.job_id == job.id,
               BenchmarkRecord.suite == BenchmarkSuite.COMPARISON,
               BenchmarkRecord.variant == BenchmarkVariant.ENGINE)
        .order_by(BenchmarkRecord.id.desc()).limit(1)).one_or_none()
    document: dict[str, Any] = {
        "id": job.id, "model_id": job.model_id, "status": job.status, "stage": job.stage,
        "progress": job.progress, "error": error, "status_detail": job.status_detail,
        "created_at": job.created_at, "started_at": job.started_at,
        "finished_at": job.finished_at, "config": job.config, "worker": job.worker,
        "attempts": job.attempts,
        "speedup_verdict": engine.speedup_verdict if engine is not None else None,
        "regression": engine.regression if engine is not None else None,
        # what was asked and shipped, the verdicts and the headline (core/outcome.py)
        "outcome": job.outcome,
        "artifacts": [{**row, "url": _artifact_path(job.id, row["name"])} for row in artifacts],
    }
    return to_json(document)


def _artifact_path(job_id: uuid.UUID, name: str) -> str:
    return f"/v1/jobs/{job_id}/artifacts/{name}"
