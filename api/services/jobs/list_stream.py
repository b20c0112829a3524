"""The project's jobs as one Server-Sent Events stream (text/event-stream), polled from the
database, so a jobs table stays current without re-reading the list.

The stream watches a window of the project's jobs: those queued or running, and those created,
started or finished at or after its start (`since`, else the moment the client connected), at
most `WINDOW_LIMIT` of them (active ones first, then the latest changed). Each poll reads the
window and sends `event: job` with a job's `JobSummary` JSON (the items of GET /v1/jobs)
whenever what a table shows of it (status, stage, progress, status_detail, speedup,
validation_passed, the outcome's headline) differs from what this connection sent last. The
first poll sends, with `since`, every job of the window (the catch-up of a client that was
away), without it nothing; then `event: ready`. Every event carries `id:`, a time to resume
from: a client that reconnects with it (as `since`, or as the Last-Event-ID header EventSource
sends by itself) misses no change. After `max_s` comes `event: timeout` and the stream
closes; silence longer than `heartbeat_s` gets a `: keep-alive` comment.

Polling works as in job_event_stream: an async generator holding no thread while it waits, each
poll a short session on a worker thread, a database outage ridden out with heartbeats.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import sqlalchemy.exc
from sqlalchemy import case, func, or_
from sqlalchemy.orm import Session

from api.schemas.jobs import JobSummary
from api.services.errors import MalformedRequest
from api.services.jobs.event_stream import Sessions
from api.services.jobs.sse import StreamPacing, StreamTiming, sse_frame
from api.services.jobs.summaries import read_summaries, summary_select
from core.db.models import Job, JobStatus
from core.db.types import utc_now

__all__ = ["EVENT_TYPES", "WINDOW_LIMIT", "open_job_list_stream", "resume_since", "utc_instant"]

logger = logging.getLogger(__name__)

# Every `event:` the stream sends, and what its data holds (the route's OpenAPI lists them).
EVENT_TYPES = {
    "job": "a job of the project changed (or, on connecting with `since`, changed since then): "
           "its summary, the same object as an item of GET /v1/jobs",
    "ready": "the catch-up is sent; changes follow as they happen ({since, replayed}: the "
             "window's start and how many `job` events the catch-up held)",
    "timeout": "the stream reached its time limit ({detail, since}); reconnect with that "
               "`since` (EventSource does it by itself, sending the last `id:` as "
               "Last-Event-ID)",
}
WINDOW_LIMIT = 500  # jobs per poll: an upper bound on each read and on what a stream remembers
_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
# A resume point lies this far before the read it follows, so a change stamped a moment before
# it committed (or by a host whose clock lags a little) is read again after a reconnect, at the
# cost of re-sending a few jobs the client already has.
_RESUME_SLACK = timedelta(seconds=5)

# What a jobs table shows of a job: a change in any of these is sent.
_Shown = tuple[str, str | None, float, str | None, float | None, bool | None, str | None]


@dataclass(frozen=True)
class _Window:
    """The jobs a stream watches: the project's active ones and those changed since `since`."""

    project_id: uuid.UUID
    since: datetime


async def open_job_list_stream(*, sessions: Sessions, project_id: uuid.UUID,
                               since: datetime | None, timing: StreamTiming
                               ) -> AsyncIterator[bytes]:
    """The stream of `project_id`'s jobs, replaying those changed since `since` (an aware
    datetime) if given; its first read already done, so a database that is down is an error
    before the response starts."""
    read_at = utc_now()
    window = _Window(project_id, utc_instant(since) if since is not None else read_at)
    first = await _read(sessions, window)
    return _stream(sessions, window, timing, first, read_at, replay=since is not None)


async def _stream(sessions: Sessions, window: _Window, timing: StreamTiming,
                  jobs: list[JobSummary], read_at: datetime, *, replay: bool
                  ) -> AsyncIterator[bytes]:
    pacing = StreamPacing(timing)
    resume = _resume_point(read_at)
    catch_up = [_job_frame(job, resume) for job in jobs] if replay else []
    shown = {job.id: _shown(job) for job in jobs}
    yield b"".join([*catch_up, sse_frame("ready", {
        "since": window.since.isoformat(), "replayed": len(catch_up)}, event_id=resume)])
    pacing.sent()
    while True:
        await anyio.sleep(min(timing.poll_s, timing.heartbeat_s))
        read_at = utc_now()
        jobs_now = await _read_through_outage(sessions, window)
        frames = []
        if jobs_now is not None:
            resume = _resume_point(read_at)
            frames = [_job_frame(job, resume) for job in jobs_now
                      if shown.get(job.id) != _shown(job)]
            shown = {job.id: _shown(job) for job in jobs_now}  # forgets what left the window
        chunks, ended = pacing.after_poll(frames, partial(_timeout_frame, timing, resume))
        for chunk in chunks:
            yield chunk
        if ended:
            return


def _timeout_frame(timing: StreamTiming, resume: str) -> bytes:
    return sse_frame("timeout", {
        "detail": f"this stream ends after {timing.max_s:g} s; reconnect with "
                  f"since={resume} (or Last-Event-ID: {resume}) to go on from here",
        "since": resume}, event_id=resume)


def _shown(job: JobSummary) -> _Shown:
    return (job.status.value, job.stage, job.progress, job.status_detail, job.speedup,
            job.validation_passed, job.outcome.headline if job.outcome is not None else None)


def _job_frame(job: JobSummary, resume: str) -> bytes:
    return sse_frame("job", job.model_dump(mode="json"), event_id=resume)


def _resume_point(read_at: datetime) -> str:
    return (read_at - _RESUME_SLACK).isoformat()


async def _read_through_outage(sessions: Sessions, window: _Window) -> list[JobSummary] | None:
    """The window's jobs; None while the database is unreachable (the stream keeps its
    connection, with heartbeats, and goes on when the database is back)."""
    try:
        return await _read(sessions, window)
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
            sqlalchemy.exc.TimeoutError) as err:
        logger.warning("project %s job stream: database unavailable (%s); polling on",
                       window.project_id, type(err).__name__)
        return None


async def _read(sessions: Sessions, window: _Window) -> list[JobSummary]:
    def read() -> list[JobSummary]:
        with sessions() as session:
            return _read_window(session, window)

    return await anyio.to_thread.run_sync(read)


def _read_window(session: Session, window: _Window) -> list[JobSummary]:
    active = Job.status.in_(_ACTIVE)
    since = window.since
    query = (summary_select(Job.project_id == window.project_id,
                            or_(active, Job.created_at >= since, Job.started_at >= since,
                                Job.finished_at >= since))
             # finished >= started >= created: the first set is the job's latest change
             .order_by(case((active, 0), else_=1),
                       func.coalesce(Job.finished_at, Job.started_at, Job.created_at).desc(),
                       Job.id.desc())
             .limit(WINDOW_LIMIT))
    return read_summaries(session.connection(), query)


def utc_instant(value: datetime) -> datetime:
    """`value`, an aware datetime, in UTC.

    Raises:
        ValueError: it is naive (ambiguous), or lies so near the ends of the calendar that it
            has no UTC time.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{value.isoformat()} has no time zone; add one, e.g. "
                         f"{value.replace(tzinfo=UTC).isoformat()}")
    try:
        return value.astimezone(UTC)
    except OverflowError as err:
        raise ValueError(f"{value.isoformat()} has no UTC time (it lies beyond the calendar's "
                         "ends)") from err


def resume_since(*, last_event_id: str | None, since: datetime | None) -> datetime | None:
    """Where the stream's window starts: the Last-Event-ID header (EventSource sends the last
    `id:` it saw when it reconnects, to the URL it first used), else the `since` query (UTC);
    None for "from now".

    Raises:
        MalformedRequest: Last-Event-ID is not a time with a zone, as the stream's ids are.
    """
    if last_event_id is None:
        return since
    try:
        return utc_instant(datetime.fromisoformat(last_event_id))
    except ValueError as err:
        raise MalformedRequest(
            f"Last-Event-ID {last_event_id[:40]!r} is not a resume point of this stream: its "
            "ids are ISO 8601 times with a zone, e.g. 2026-12-01T22:30:00+00:00") from err
