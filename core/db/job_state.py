"""The only place a job's status changes; every move is a guarded update.

A job moves queued → running → succeeded | failed | cancelled. Each function updates the row only
if it is still in the state the move starts from, so a redelivered task or a cancel racing with the
worker can never run a job twice or resurrect a finished one.
"""

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from core.db.models import Job, JobEvent, JobStatus
from core.db.types import utc_now
from core.outcome import job_outcome

__all__ = [
    "cancel",
    "claim",
    "count_events",
    "fail",
    "heartbeat",
    "record_event",
    "requeue",
    "report_progress",
    "stale_jobs",
    "start_stage",
    "status_of",
    "succeed",
    "sweep_stale",
]


def _move(
    session: Session, job_id: uuid.UUID, from_states: Iterable[JobStatus], *,
    owner: str | None = None, **values: object
) -> Job | None:
    """Move the job to `values` if it is in one of `from_states` and, with `owner`, still
    claimed by that worker (a worker lost and replaced writes nothing of the job again)."""
    where = [Job.id == job_id, Job.status.in_([s.value for s in from_states])]
    if owner is not None:
        where.append(Job.worker == owner)
    stmt = (
        update(Job)
        .where(*where)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if session.execute(stmt).rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.get(Job, job_id, populate_existing=True)


def record_event(session: Session, job_id: uuid.UUID, message: str, stage: str | None = None) -> None:
    session.add(JobEvent(job_id=job_id, stage=stage, message=message))


def count_events(session: Session, job_id: uuid.UUID, prefix: str) -> int:
    """How many of the job's events start with `prefix` (e.g. how often it was requeued)."""
    return int(session.scalar(select(func.count()).select_from(JobEvent).where(
        JobEvent.job_id == job_id, JobEvent.message.startswith(prefix))) or 0)


def claim(session: Session, job_id: uuid.UUID, worker: str) -> Job | None:
    """Mark a queued job as running; None if it was already claimed, finished or cancelled."""
    now = utc_now()
    job = _move(
        session,
        job_id,
        [JobStatus.QUEUED],
        status=JobStatus.RUNNING.value,
        status_detail=None,  # whatever the job waited for, it has a worker now
        worker=worker,
        started_at=now,
        heartbeat_at=now,
        attempts=Job.attempts + 1,
    )
    if job is not None:
        record_event(session, job_id, f"claimed by worker {worker}")
    return job


def start_stage(session: Session, job_id: uuid.UUID, stage: str, progress: float,
                note: str | None = None, *, owner: str | None = None) -> bool:
    """Record that a running job entered `stage` (`note` says why, e.g. a fallback attempt);
    False if it is no longer running (cancelled)."""
    job = _move(
        session,
        job_id,
        [JobStatus.RUNNING],
        owner=owner,
        stage=stage,
        progress=progress,
        heartbeat_at=utc_now(),
    )
    if job is None:
        return False
    record_event(session, job_id, f"stage {stage} started" + (f" ({note})" if note else ""),
                 stage=stage)
    return True


def report_progress(session: Session, job_id: uuid.UUID, progress: float, *,
                    owner: str | None = None) -> bool:
    """Set a running job's progress within its stage and touch its heartbeat; False if it is
    no longer running (cancelled)."""
    return _move(session, job_id, [JobStatus.RUNNING], owner=owner, progress=progress,
                 heartbeat_at=utc_now()) is not None


def status_of(session: Session, job_id: uuid.UUID) -> JobStatus | None:
    """The job's status now (None for an unknown job); a read, not a move."""
    status = session.scalar(select(Job.status).where(Job.id == job_id))
    return JobStatus(status) if status is not None else None


def heartbeat(session: Session, job_id: uuid.UUID, *, owner: str | None = None) -> bool:
    """Show that the worker is still alive; False if the job is no longer running (or, with
    `owner`, no longer running on that worker)."""
    return _move(session, job_id, [JobStatus.RUNNING], owner=owner,
                 heartbeat_at=utc_now()) is not None


def succeed(session: Session, job_id: uuid.UUID, *, owner: str | None = None) -> Job | None:
    """Mark a running job succeeded (commit it with its artifact rows); None if it was cancelled
    (or, with `owner`, was taken over by another worker)."""
    job = _move(
        session,
        job_id,
        [JobStatus.RUNNING],
        owner=owner,
        status=JobStatus.SUCCEEDED.value,
        stage="done",
        progress=1.0,
        finished_at=utc_now(),
    )
    if job is not None:
        record_event(session, job_id, "succeeded", stage="done")
    return job


def fail(session: Session, job_id: uuid.UUID, code: str, message: str, *,
         owner: str | None = None) -> Job | None:
    """Mark a queued or running job failed with a code and a message the user can act on;
    with `owner`, only while that worker still holds it."""
    job = _move(
        session,
        job_id,
        [JobStatus.QUEUED, JobStatus.RUNNING],
        owner=owner,
        status=JobStatus.FAILED.value,
        status_detail=None,
        error_code=code,
        error_message=message,
        finished_at=utc_now(),
    )
    if job is not None:
        record_event(session, job_id, f"failed: {code}: {message}", stage=job.stage)
        job.outcome = job_outcome(config=job.config, status=JobStatus.FAILED.value,
                                  error=(code, message)).model_dump(mode="json")
    return job


def requeue(session: Session, job_id: uuid.UUID, why: str, *,
            owner: str | None = None) -> Job | None:
    """Put a running job back in the queue for the delivery at hand to claim again (a search
    whose process died resumes); None if it no longer runs (on `owner`, if given)."""
    job = _move(session, job_id, [JobStatus.RUNNING], owner=owner,
                status=JobStatus.QUEUED.value, worker=None)
    if job is not None:
        record_event(session, job_id, why, stage=job.stage)
    return job


def cancel(session: Session, job_id: uuid.UUID) -> Job | None:
    """Cancel a queued or running job; None if it already finished. A running job's supervisor
    sees it at its next row check (about a second) and kills the job's process; its artifacts
    are discarded."""
    job = _move(
        session,
        job_id,
        [JobStatus.QUEUED, JobStatus.RUNNING],
        status=JobStatus.CANCELLED.value,
        status_detail=None,
        finished_at=utc_now(),
    )
    if job is not None:
        record_event(session, job_id, "cancelled by request", stage=job.stage)
        job.outcome = job_outcome(config=job.config,
                                  status=JobStatus.CANCELLED.value).model_dump(mode="json")
    return job


def stale_jobs(session: Session, stale_after: timedelta, now: datetime | None = None) -> list[Job]:
    """Running jobs whose worker has not sent a heartbeat within `stale_after`."""
    cutoff = (now or utc_now()) - stale_after
    return list(session.scalars(
        select(Job).where(Job.status == JobStatus.RUNNING.value, Job.heartbeat_at < cutoff)
    ).all())


def sweep_stale(session: Session, stale_after: timedelta, now: datetime | None = None) -> list[uuid.UUID]:
    """Fail running jobs whose worker has not sent a heartbeat within `stale_after`."""
    swept = []
    for job in stale_jobs(session, stale_after, now):
        message = (
            f"the worker stopped sending heartbeats (none for more than "
            f"{int(stale_after.total_seconds())} s); it probably crashed or was killed"
        )
        if fail(session, job.id, "WorkerLost", message) is not None:
            swept.append(job.id)
    return swept
