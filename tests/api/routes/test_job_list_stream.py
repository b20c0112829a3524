"""GET /v1/jobs/stream: the project's jobs as Server-Sent Events, a `job` event (the job's list
item) whenever what a jobs table shows of one changes, a catch-up from `since` (or the
Last-Event-ID EventSource sends), other projects' jobs never, a timeout saying where to resume.

Jobs move here through core.db.job_state, as the worker moves them, while the stream polls; the
stream's reads and the test's writes share the test's session, taking turns under a lock."""

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_read_sessions
from core.db import job_state
from core.db.models import Job
from core.settings import HttpSettings, Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.job_rows import finish
from tests.support.sse import ServerSentEvent, parse_sse

STREAM = "/v1/jobs/stream"


@pytest.fixture
def quick_streams(client: TestClient, settings: Settings) -> HttpSettings:
    """Streams that poll every 20 ms, beat after 100 ms of silence and end after 2 s."""
    settings.http = HttpSettings(events_poll_s=0.02, events_heartbeat_s=0.1, events_max_s=2.0)
    return settings.http


@pytest.fixture
def db_turns(client: TestClient, db_session: Session) -> threading.RLock:
    """The lock the stream's reads hold: the test holds it to change jobs between polls."""
    lock = threading.RLock()

    @contextmanager
    def taking_turns() -> Iterator[Session]:
        with lock:
            yield db_session

    client.app.dependency_overrides[get_read_sessions] = lambda: taking_turns  # type: ignore[attr-defined]
    return lock


def submit(client: TestClient, headers: dict[str, str] | None = None) -> uuid.UUID:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))},
                        headers=headers)
    assert model.status_code in (200, 201), model.text
    job = client.post("/v1/jobs", json={"model_id": model.json()["id"]}, headers=headers)
    assert job.status_code == 202, job.text
    return uuid.UUID(job.json()["id"])


def next_event(events: Iterator[ServerSentEvent]) -> ServerSentEvent:
    """The next event that is not a heartbeat."""
    return next(e for e in events if e.event)


@contextmanager
def streaming(client: TestClient, **request: Any) -> Iterator[Iterator[ServerSentEvent]]:
    with client.stream("GET", STREAM, **request) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        yield parse_sse(response.iter_bytes())


def test_a_stream_starts_ready_then_sends_a_job_when_its_state_changes(
        client: TestClient, db_session: Session, db_turns: threading.RLock,
        quick_streams: HttpSettings) -> None:
    job_id = submit(client)

    with streaming(client) as events:
        ready = next_event(events)
        assert ready.event == "ready" and ready.json()["replayed"] == 0  # no catch-up asked for
        with db_turns:
            assert job_state.claim(db_session, job_id, "celery@test") is not None
            assert job_state.start_stage(db_session, job_id, "optimize", 0.2)
            db_session.commit()
        started = next_event(events)
        with db_turns:
            assert job_state.heartbeat(db_session, job_id)  # no table shows a heartbeat
            db_session.commit()
        with db_turns:
            assert job_state.report_progress(db_session, job_id, 0.35)
            db_session.commit()
        moved = next_event(events)

    assert (started.event, started.json()["id"], started.json()["status"],
            started.json()["stage"], started.json()["progress"]) == (
        "job", str(job_id), "running", "optimize", 0.2)
    assert (moved.event, moved.json()["progress"]) == ("job", 0.35)
    # The event's data is the job's list item, field for field.
    [item] = client.get("/v1/jobs").json()["items"]
    assert moved.json() == item


def test_a_job_that_ends_is_sent_with_its_results(
        client: TestClient, db_session: Session, db_turns: threading.RLock,
        quick_streams: HttpSettings) -> None:
    job_id = submit(client)

    with streaming(client) as events:
        assert next_event(events).event == "ready"
        with db_turns:
            finish(db_session, str(job_id), speedup=1.3, passed=[True],
                   took=timedelta(seconds=4))
        ended = next_event(events).json()

    assert {k: ended[k] for k in ("status", "speedup", "validation_passed", "duration_s")} == {
        "status": "succeeded", "speedup": 1.3, "validation_passed": True, "duration_s": 4.0}
    assert ended["outcome"]["headline"] == client.get(f"/v1/jobs/{job_id}").json()[
        "outcome"]["headline"]
    assert ended["outcome"]["headline"].startswith("Shipped the onnxruntime fp32 engine: ")


def test_another_projects_jobs_are_never_sent(
        client: TestClient, db_session: Session, db_turns: threading.RLock, settings: Settings,
        quick_streams: HttpSettings) -> None:
    theirs = submit(client, headers=bearer(new_key(db_session, settings)[1]))
    mine = submit(client)

    with streaming(client, params={"since": "2000-01-01T00:00:00Z"}) as events:
        caught_up = [next_event(events) for _ in range(2)]
        with db_turns:
            job_state.claim(db_session, theirs, "celery@test")
            db_session.commit()
        threading.Event().wait(0.2)  # ten polls: time enough to (wrongly) send it
        with db_turns:
            job_state.claim(db_session, mine, "celery@test")
            db_session.commit()
        after = next_event(events)

    assert [(e.event, e.json().get("id")) for e in caught_up] == [
        ("job", str(mine)), ("ready", None)]
    assert (after.event, after.json()["id"], after.json()["status"]) == (
        "job", str(mine), "running")


def _at(job_id: uuid.UUID, db_session: Session, *, created: datetime,
        finished: datetime | None = None, status: str = "queued") -> None:
    job = db_session.get_one(Job, job_id)
    job.created_at, job.status = created, status
    job.started_at = job.finished_at = finished
    db_session.commit()


@pytest.fixture
def history(client: TestClient, db_session: Session) -> dict[str, uuid.UUID]:
    """Jobs that ended at 10:00 and 12:00 on 2026-12-01, and one queued since 09:00."""
    day = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = {"ended_10": submit(client), "ended_12": submit(client), "queued": submit(client)}
    _at(jobs["ended_10"], db_session, created=day + timedelta(hours=9),
        finished=day + timedelta(hours=10), status="succeeded")
    _at(jobs["ended_12"], db_session, created=day + timedelta(hours=9),
        finished=day + timedelta(hours=12), status="failed")
    _at(jobs["queued"], db_session, created=day + timedelta(hours=9))
    return jobs


def _catch_up(client: TestClient, **request: Any) -> list[ServerSentEvent]:
    with streaming(client, **request) as events:
        caught_up = [next_event(events)]
        while caught_up[-1].event != "ready":
            caught_up.append(next_event(events))
    return caught_up


def test_since_replays_the_jobs_changed_since_then_and_the_active_ones(
        client: TestClient, history: dict[str, uuid.UUID], db_turns: threading.RLock,
        quick_streams: HttpSettings) -> None:
    caught_up = _catch_up(client, params={"since": "2026-12-01T11:00:00+00:00"})

    assert [e.event for e in caught_up] == ["job", "job", "ready"]
    # active first, then the latest changed
    assert [e.json()["id"] for e in caught_up[:2]] == [str(history["queued"]),
                                                      str(history["ended_12"])]
    assert caught_up[-1].json() == {"since": "2026-12-01T11:00:00+00:00", "replayed": 2}
    # Another zone names the same instant.
    again = _catch_up(client, params={"since": "2026-12-01T12:30:00+01:30"})
    assert [e.json().get("id") for e in again] == [str(history["queued"]),
                                                   str(history["ended_12"]), None]


def test_last_event_id_resumes_from_its_time_and_wins_over_since(
        client: TestClient, history: dict[str, uuid.UUID], db_turns: threading.RLock,
        quick_streams: HttpSettings) -> None:
    caught_up = _catch_up(client, params={"since": "2026-12-01T09:30:00Z"},
                          headers={"Last-Event-ID": "2026-12-01T11:00:00+00:00"})

    assert [e.json().get("id") for e in caught_up[:-1]] == [str(history["queued"]),
                                                           str(history["ended_12"])]


def test_every_event_carries_a_resume_point_a_little_before_its_read(
        client: TestClient, history: dict[str, uuid.UUID], db_turns: threading.RLock,
        quick_streams: HttpSettings) -> None:
    before = datetime.now(UTC)
    caught_up = _catch_up(client, params={"since": "2026-12-01T11:00:00Z"})

    resume_points = {datetime.fromisoformat(e.id or "") for e in caught_up}
    assert len(resume_points) == 1
    [resume] = resume_points
    assert before - timedelta(seconds=10) < resume < before  # a few seconds of slack


def test_a_quiet_stream_beats_and_ends_at_its_limit_saying_where_to_resume(
        client: TestClient, db_turns: threading.RLock, quick_streams: HttpSettings) -> None:
    quick_streams.events_max_s = 0.4
    with streaming(client) as events:
        received = list(events)

    assert received[0].event == "ready"
    assert any(e.comments == ["keep-alive"] for e in received)
    timeout = received[-1]
    assert timeout.event == "timeout"
    assert timeout.id == timeout.json()["since"]
    assert f"since={timeout.id}" in timeout.json()["detail"]
    datetime.fromisoformat(timeout.json()["since"])


@pytest.mark.parametrize("since", ["yesterday", "2026-12-01T11:00:00", "9999-12-31T23:59:59-23:00"],
                         ids=["not-a-time", "no-zone", "past-the-calendar"])
def test_a_bad_since_is_422_naming_it(client: TestClient, since: str) -> None:
    response = client.get(STREAM, params={"since": since})

    assert response.status_code == 422
    assert response.json()["detail"].startswith("since: ")


@pytest.mark.parametrize("bad", ["41", "2026-12-01T11:00:00", "soon"])
def test_a_last_event_id_that_is_no_time_with_a_zone_is_400_naming_the_header(
        client: TestClient, bad: str) -> None:
    response = client.get(STREAM, headers={"Last-Event-ID": bad})

    assert response.status_code == 400
    assert response.json()["error"] == "MalformedRequest"
    assert "Last-Event-ID" in response.json()["detail"] and repr(bad) in response.json()["detail"]


def test_openapi_documents_the_stream_and_its_event_types(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"][STREAM]["get"]

    ok = operation["responses"]["200"]
    assert list(ok["content"]) == ["text/event-stream"]
    assert "event: job" in ok["content"]["text/event-stream"]["example"]
    for event_type in ("job", "ready", "timeout"):
        assert f"`{event_type}`" in ok["description"]
    parameters = {p["name"]: p["in"] for p in operation["parameters"]}
    assert parameters == {"since": "query", "last-event-id": "header"}
