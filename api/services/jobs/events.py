"""A job's timeline as its event stream shows it: the stored events after an id, each with its
kind, and the job's state now, read together in one short session.

The kinds are derived from what `core.db.job_state` (and the job's creation in
api/services/jobs/commands.py) write: "stage <name> started" is a `stage` event; queued, claimed,
succeeded, failed and cancelled are `status` events; anything else a worker or the janitor
noted (a TensorRT build's log, a re-send to the queue) is a `log` event.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from api.services.errors import MalformedRequest
from core.db.models import Job, JobEvent, JobStatus

__all__ = ["EventBatch", "EventKind", "JobState", "StoredEvent", "read_batch", "resume_point"]

EventKind = Literal["stage", "status", "log"]

_STATUS_MESSAGES = frozenset({"queued", "succeeded", "cancelled by request"})
_STATUS_PREFIXES = ("queued; ", "claimed by worker ", "failed: ")
_FINAL = frozenset(s.value for s in JobStatus if s.is_final)
_LARGEST_ID = 2**63 - 1  # a 64-bit integer: past it the database could not even compare it


@dataclass(frozen=True)
class JobState:
    """What a dashboard shows of a job at a glance; a `status` event carries it."""

    status: str
    stage: str | None
    progress: float
    status_detail: str | None
    error_code: str | None
    error_message: str | None
    # the ended job's outcome (core/outcome.py; its headline is what every surface prints)
    outcome: dict[str, Any] | None = None

    @property
    def final(self) -> bool:
        return self.status in _FINAL

    def differs_only_in_progress(self, other: "JobState") -> bool:
        return self != other and self == JobState(**{**other.__dict__, "progress": self.progress})

    def to_data(self) -> dict[str, Any]:
        error = ({"code": self.error_code, "message": self.error_message or ""}
                 if self.error_code is not None else None)
        return {"status": self.status, "stage": self.stage, "progress": self.progress,
                "status_detail": self.status_detail, "error": error, "outcome": self.outcome}


@dataclass(frozen=True)
class StoredEvent:
    """One row of job_events; its id only grows, so it is the stream's resume point."""

    id: int
    stage: str | None
    message: str
    created_at: datetime

    @property
    def kind(self) -> EventKind:
        if self.stage is not None and self.message.startswith(f"stage {self.stage} started"):
            return "stage"
        if self.message in _STATUS_MESSAGES or self.message.startswith(_STATUS_PREFIXES):
            return "status"
        return "log"

    def to_data(self) -> dict[str, Any]:
        return {"id": self.id, "stage": self.stage, "message": self.message,
                "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class EventBatch:
    """The job's state and its next events; `complete`: no more events after these (a full
    batch may have more waiting, so the job's state is not yet the latest word)."""

    state: JobState
    events: list[StoredEvent]
    complete: bool


def read_batch(session: Session, project_id: uuid.UUID, job_id: uuid.UUID, *, after_id: int,
               limit: int) -> EventBatch | None:
    """The job's state and up to `limit` of its events with ids above `after_id`, in id order;
    None if `project_id` has no such job.

    The state is read first: an event commits with the state change it records, so when the
    state says the job has ended, its last event is among those read after it.
    """
    connection = session.connection()
    state = connection.execute(
        select(Job.status, Job.stage, Job.progress, Job.status_detail, Job.error_code,
               Job.error_message, Job.outcome).where(*_visible_job(project_id, job_id))
    ).one_or_none()
    if state is None:
        return None
    rows = connection.execute(
        select(JobEvent.id, JobEvent.stage, JobEvent.message, JobEvent.created_at)
        .where(JobEvent.job_id == job_id, JobEvent.id > after_id)
        .order_by(JobEvent.id).limit(limit)).all()
    return EventBatch(state=JobState(*state), events=[StoredEvent(*row) for row in rows],
                      complete=len(rows) < limit)


def _visible_job(project_id: uuid.UUID, job_id: uuid.UUID) -> list[ColumnElement[bool]]:
    """The conditions that find the job a stream may show: the job, if it is the project's
    (another project's job is as unknown as a missing one)."""
    return [Job.id == job_id, Job.project_id == project_id]


def resume_point(*, last_event_id: str | None, after: str | None) -> int:
    """The id after which the stream starts: the Last-Event-ID header (a browser's EventSource
    sends it on reconnecting, with the URL it first used), else the `after` query; 0 for the
    whole timeline.

    Raises:
        MalformedRequest: the value is not an event id (a whole number, 0 or more).
    """
    if last_event_id is not None and last_event_id.strip():
        return _event_id(last_event_id, "the Last-Event-ID header")
    if after is not None:
        return _event_id(after, "the query parameter 'after'")
    return 0


def _event_id(raw: str, source: str) -> int:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > _LARGEST_ID:
        raise MalformedRequest(
            f"{source} is {raw[:40]!r}, which is not an event id: ids are whole numbers from 0 "
            f"up, sent as `id:` lines by GET /v1/jobs/{{id}}/events; send the last one received "
            f"to resume after it, or leave it out to start from the job's first event")
    return int(text)
