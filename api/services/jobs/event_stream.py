"""A job's events as a Server-Sent Events stream (text/event-stream), polled from the database.

Each stored event goes out as `id: <event id>`, `event: stage|status|log`, `data: <json>`; the
job's state (status, stage, progress, error) as `event: status` whenever it changes, or
`event: progress` when only its progress moved (these carry no id: they are re-sent, current,
on every connection). After the job's final state comes `event: end` and the stream closes; a
stream open `max_s` ends with `event: timeout` instead, and the client reconnects with
Last-Event-ID. Silence longer than `heartbeat_s` gets a `: keep-alive` comment.

The stream is an async generator: it holds no worker thread while it waits, and each poll is a
short session on a worker thread of its own, so a stream holds no connection between polls and
a client that goes away cancels it at its next wait.
"""

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

import anyio
import sqlalchemy.exc
from sqlalchemy.orm import Session

from api.services.errors import JobNotFound
from api.services.jobs.events import EventBatch, read_batch
from api.services.jobs.sse import KEEP_ALIVE, StreamPacing, StreamTiming, sse_frame
from optimizer.errors import InternalError

__all__ = ["EVENT_TYPES", "KEEP_ALIVE", "StreamTiming", "open_job_event_stream"]

logger = logging.getLogger(__name__)

Sessions = Callable[[], AbstractContextManager[Session]]

# Every `event:` a stream sends, and what its data holds (the route's OpenAPI lists them).
EVENT_TYPES = {
    "stage": "a stored event: the job entered a stage ({id, stage, message, created_at})",
    "status": "a stored event of a state change (queued, claimed, succeeded, failed, "
              "cancelled), with an id; or, without one, the job's state whenever it changes "
              "({status, stage, progress, status_detail, error, outcome})",
    "progress": "the job's state when only its progress moved (the same fields as status)",
    "log": "a stored note from the worker or the janitor ({id, stage, message, created_at})",
    "end": "the job has ended: its final state (as status), with its `outcome` (asked, "
           "shipped, speed-up and accuracy verdicts, why, and the `headline` sentence); the "
           "stream closes",
    "timeout": "the stream reached its time limit ({detail, last_event_id}); reconnect with "
               "that Last-Event-ID to go on",
}
_BATCH = 500  # events per poll; a longer backlog is sent over several reads without waiting


@dataclass(frozen=True)
class _JobOf:
    """The streamed job, and the project it must belong to."""

    project_id: uuid.UUID
    job_id: uuid.UUID


async def open_job_event_stream(*, sessions: Sessions, project_id: uuid.UUID, job_id: uuid.UUID,
                                after_id: int, timing: StreamTiming) -> AsyncIterator[bytes]:
    """The stream of `job_id`'s events after `after_id` (a job of `project_id`'s), its first
    read already done, so an unknown job is an error before the response starts.

    Raises:
        JobNotFound: there is no such job in the project.
    """
    job = _JobOf(project_id, job_id)
    first = await _read(sessions, job, after_id)
    if first is None:
        raise JobNotFound.for_job(job_id)
    return _stream(sessions, job, after_id, timing, first)


async def _stream(sessions: Sessions, job: "_JobOf", after_id: int, timing: StreamTiming,
                  batch: EventBatch) -> AsyncIterator[bytes]:
    pacing = StreamPacing(timing)
    shown = None  # the job state last sent
    while True:
        frames = []
        for event in batch.events:
            frames.append(sse_frame(event.kind, event.to_data(), event_id=event.id))
            after_id = event.id
        state = batch.state
        if batch.complete and state != shown:
            kind = ("progress" if shown is not None and state.differs_only_in_progress(shown)
                    else "status")
            frames.append(sse_frame(kind, state.to_data()))
            shown = state
        if batch.complete and state.final:
            frames.append(sse_frame("end", state.to_data()))
            yield b"".join(frames)
            return
        chunks, ended = pacing.after_poll(frames, partial(_timeout_frame, timing, after_id))
        for chunk in chunks:
            yield chunk
        if ended:
            return
        if batch.complete:
            await anyio.sleep(min(timing.poll_s, timing.heartbeat_s))
        batch = await _read_through_outage(sessions, job, after_id, batch)


def _timeout_frame(timing: StreamTiming, after_id: int) -> bytes:
    return sse_frame("timeout", {
        "detail": f"this stream ends after {timing.max_s:g} s; reconnect with "
                  f"Last-Event-ID: {after_id} to go on from here",
        "last_event_id": after_id})


async def _read_through_outage(sessions: Sessions, job: "_JobOf", after_id: int,
                               previous: EventBatch) -> EventBatch:
    """The next batch; while the database is unreachable, nothing new (the stream keeps its
    connection, with heartbeats, and goes on when the database is back)."""
    try:
        batch = await _read(sessions, job, after_id)
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
            sqlalchemy.exc.TimeoutError) as err:
        logger.warning("job %s event stream: database unavailable (%s); polling on",
                       job.job_id, type(err).__name__)
        return EventBatch(state=previous.state, events=[], complete=True)
    if batch is None:  # jobs are never deleted
        raise InternalError(f"job {job.job_id} vanished while its events were streamed")
    return batch


async def _read(sessions: Sessions, job: "_JobOf", after_id: int) -> EventBatch | None:
    def read() -> EventBatch | None:
        with sessions() as session:
            return read_batch(session, job.project_id, job.job_id, after_id=after_id,
                              limit=_BATCH)

    return await anyio.to_thread.run_sync(read)

