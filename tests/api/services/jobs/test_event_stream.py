"""The event stream's generator driven step by step against a real database: what each change of
a job becomes on the wire, and which stored events are of which kind."""

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from api.services.errors import JobNotFound
from api.services.jobs.event_stream import KEEP_ALIVE, StreamTiming, open_job_event_stream
from core.db import job_state
from core.db.session import make_engine
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.processes import free_port
from tests.support.sse import ServerSentEvent, parse_sse

# A poll every 10 ms; no heartbeat or time limit within a test.
_TIMING = StreamTiming(poll_s=0.01, heartbeat_s=60, max_s=60)


@pytest.fixture
def project_id(api_key: tuple[uuid.UUID, str]) -> uuid.UUID:
    return api_key[0]  # the `client` fixture's project, which owns `job_id`


@pytest.fixture
def job_id(client: TestClient) -> uuid.UUID:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    return uuid.UUID(client.post("/v1/jobs", json={"model_id": model.json()["id"]}).json()["id"])


async def _next(stream: AsyncIterator[bytes]) -> list[ServerSentEvent]:
    """The events of the stream's next write (it writes when something changed)."""
    with anyio.fail_after(10):
        return list(parse_sse([await anext(stream)]))


def test_each_change_of_a_running_job_is_sent_once_as_it_commits(
        db_session: Session, project_id: uuid.UUID, job_id: uuid.UUID) -> None:
    def commit() -> None:
        db_session.commit()

    async def follow() -> list[list[tuple[str, str | None]]]:
        stream = await open_job_event_stream(sessions=lambda: nullcontext(db_session),
                                             project_id=project_id, job_id=job_id, after_id=0, timing=_TIMING)
        writes = [await _next(stream)]
        job_state.claim(db_session, job_id, "celery@test")
        commit()
        writes.append(await _next(stream))
        job_state.start_stage(db_session, job_id, "build_engine", 0.3)
        commit()
        writes.append(await _next(stream))
        job_state.report_progress(db_session, job_id, 0.4)
        commit()
        writes.append(await _next(stream))
        job_state.record_event(db_session, job_id, "[TensorRT] tactic 7 chosen", "build_engine")
        commit()
        writes.append(await _next(stream))
        job_state.cancel(db_session, job_id)
        commit()
        writes.append(await _next(stream))
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        return [[(e.event, e.json().get("message") or e.json()["status"]) for e in write]
                for write in writes]

    assert anyio.run(follow) == [
        [("status", "queued"), ("status", "queued")],  # the stored event, then the job's state
        [("status", "claimed by worker celery@test"), ("status", "running")],
        [("stage", "stage build_engine started"), ("status", "running")],
        [("progress", "running")],  # progress alone
        [("log", "[TensorRT] tactic 7 chosen")],  # the job's state did not change
        [("status", "cancelled by request"), ("status", "cancelled"), ("end", "cancelled")],
    ]


def test_a_backlog_longer_than_a_read_is_sent_whole_before_the_final_state(
        db_session: Session, project_id: uuid.UUID, job_id: uuid.UUID) -> None:
    job_state.claim(db_session, job_id, "celery@test")
    for line in range(1200):  # more than two reads' worth
        job_state.record_event(db_session, job_id, f"line {line}", "build_engine")
    job_state.cancel(db_session, job_id)
    db_session.commit()

    async def read_all() -> list[ServerSentEvent]:
        stream = await open_job_event_stream(sessions=lambda: nullcontext(db_session),
                                             project_id=project_id, job_id=job_id, after_id=0, timing=_TIMING)
        return list(parse_sse([chunk async for chunk in stream]))

    events = anyio.run(read_all)

    stored = [e for e in events if e.id is not None]
    assert len(stored) == 1203
    assert [e.json()["message"] for e in stored[2:-1]] == [f"line {n}" for n in range(1200)]
    assert [e.event for e in events[-2:]] == ["status", "end"]
    assert [e.event for e in events if e.id is None] == ["status", "end"]  # no state mid-backlog


def test_the_stream_of_an_unknown_job_fails_before_it_starts(db_session: Session) -> None:
    async def open_unknown() -> None:
        await open_job_event_stream(sessions=lambda: nullcontext(db_session),
                                    project_id=uuid.uuid4(), job_id=uuid.uuid4(), after_id=0,
                                    timing=_TIMING)

    with pytest.raises(JobNotFound, match="does not exist"):
        anyio.run(open_unknown)


def test_a_stream_rides_out_a_database_outage_and_goes_on_where_it_was(
        db_session: Session, project_id: uuid.UUID, job_id: uuid.UUID) -> None:
    # The outage is real: meanwhile sessions point where no PostgreSQL listens (refused).
    dead = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/fuseforge")
    up = {"database": True}
    refused_reads: list[None] = []

    def sessions() -> AbstractContextManager[Session]:
        if up["database"]:
            return nullcontext(db_session)
        refused_reads.append(None)
        return _dead_session(dead)

    async def follow() -> tuple[list[bytes], list[bytes]]:
        stream = await open_job_event_stream(
            sessions=sessions, project_id=project_id, job_id=job_id, after_id=0,
            timing=StreamTiming(poll_s=0.01, heartbeat_s=0.05, max_s=60))
        await anext(stream)
        up["database"] = False
        quiet = []
        while len(refused_reads) < 3:
            quiet.append(await anext(stream))  # no news, but the connection is kept
        job_state.cancel(db_session, job_id)
        db_session.commit()
        up["database"] = True
        return quiet, [chunk async for chunk in stream]

    try:
        quiet, resumed = anyio.run(follow)
    finally:
        dead.dispose()

    assert quiet and all(write == KEEP_ALIVE for write in quiet)
    after = list(parse_sse(resumed))
    assert [e.json()["message"] for e in after if e.id is not None] == ["cancelled by request"]
    assert after[-1].event == "end"


@contextmanager
def _dead_session(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
