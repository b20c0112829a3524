"""GET /v1/jobs/{id}/events: a job's timeline as Server-Sent Events, resumable with
Last-Event-ID (or ?after=), ending with the job's final state, a timeout or the client leaving.

The job's moves are made here through core.db.job_state, as the worker makes them; the run by
a real worker is in tests/worker/pipeline/test_job_event_stream.py."""

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_read_sessions
from core.db import job_state
from core.outcome import job_outcome
from core.settings import HttpSettings, Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.sse import ServerSentEvent, parse_sse
from tests.support.waiting import wait_until

OUTCOME = job_outcome(config={}, status="succeeded",
                      engine_record={"speedup_vs_reference": 1.3, "speedup_ci_low": 1.2,
                                     "speedup_ci_high": 1.4, "speedup_verdict": "faster"},
                      validation={"passed": True, "outputs": []}).model_dump(mode="json")


@pytest.fixture
def job_id(client: TestClient) -> uuid.UUID:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert model.status_code == 201, model.text
    job = client.post("/v1/jobs", json={"model_id": model.json()["id"]})
    assert job.status_code == 202, job.text
    return uuid.UUID(job.json()["id"])


@pytest.fixture
def finished_job_id(job_id: uuid.UUID, db_session: Session) -> uuid.UUID:
    """A job that ran two stages, noted a log line and succeeded."""
    assert job_state.claim(db_session, job_id, "celery@test") is not None
    assert job_state.start_stage(db_session, job_id, "load", 0.05)
    job_state.record_event(db_session, job_id, "read 12 nodes", stage="load")
    assert job_state.start_stage(db_session, job_id, "optimize", 0.2, note="fallback: none")
    job = job_state.succeed(db_session, job_id)
    assert job is not None
    job.outcome = OUTCOME  # as the worker's recorder writes it with `succeeded`
    db_session.commit()
    return job_id


def _events(client: TestClient, job_id: uuid.UUID, **request: object) -> list[ServerSentEvent]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", **request) as response:  # type: ignore[arg-type]
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        return list(parse_sse(response.iter_bytes()))


def test_a_finished_job_streams_its_timeline_then_its_final_state_and_closes(
        client: TestClient, finished_job_id: uuid.UUID) -> None:
    events = _events(client, finished_job_id)

    stored = [e for e in events if e.id is not None]
    assert [(e.event, e.json()["message"]) for e in stored] == [
        ("status", "queued"), ("status", "claimed by worker celery@test"),
        ("stage", "stage load started"), ("log", "read 12 nodes"),
        ("stage", "stage optimize started (fallback: none)"), ("status", "succeeded")]
    ids = [int(e.id) for e in stored if e.id is not None]
    assert ids == sorted(set(ids)) and [e.json()["id"] for e in stored] == ids
    assert stored[3].json()["stage"] == "load"
    # Then the job's state, once, and the end, which carries it too.
    assert [e.event for e in events[len(stored):]] == ["status", "end"]
    final = {"status": "succeeded", "stage": "done", "progress": 1.0, "status_detail": None,
             "error": None, "outcome": OUTCOME}
    assert events[-2].json() == final and events[-1].json() == final
    # The end carries the job's outcome and its headline (issue 45).
    assert events[-1].json()["outcome"]["headline"] == (
        "Shipped the onnxruntime fp32 engine: 1.30x faster (1.20-1.40), accuracy passed.")


def test_last_event_id_resumes_after_that_event_and_sends_none_again(
        client: TestClient, finished_job_id: uuid.UUID) -> None:
    whole = [e for e in _events(client, finished_job_id) if e.id is not None]
    middle = whole[2].id

    resumed = _events(client, finished_job_id, headers={"Last-Event-ID": middle})

    assert [(e.id, e.data) for e in resumed if e.id is not None] == [
        (e.id, e.data) for e in whole[3:]]
    assert resumed[-1].event == "end"


def test_after_query_resumes_too_and_last_event_id_wins_over_it(
        client: TestClient, finished_job_id: uuid.UUID) -> None:
    ids = [e.id for e in _events(client, finished_job_id) if e.id is not None]

    by_query = _events(client, finished_job_id, params={"after": ids[3]})
    # EventSource reconnects to the URL it first used, with the header of where it got to.
    both = _events(client, finished_job_id, params={"after": ids[0]},
                   headers={"Last-Event-ID": ids[4]})

    assert [e.id for e in by_query if e.id is not None] == ids[4:]
    assert [e.id for e in both if e.id is not None] == ids[5:]


def test_resuming_after_the_last_event_of_a_finished_job_sends_its_state_and_ends(
        client: TestClient, finished_job_id: uuid.UUID) -> None:
    last = [e.id for e in _events(client, finished_job_id) if e.id is not None][-1]

    events = _events(client, finished_job_id, headers={"Last-Event-ID": last})

    assert [(e.event, e.id) for e in events] == [("status", None), ("end", None)]


def test_a_failed_job_ends_with_its_error(client: TestClient, job_id: uuid.UUID,
                                          db_session: Session) -> None:
    job_state.claim(db_session, job_id, "celery@test")
    job_state.fail(db_session, job_id, "PassError", "fuse_gelu broke the graph")
    db_session.commit()

    events = _events(client, job_id)

    assert events[-1].event == "end"
    assert events[-1].json()["status"] == "failed"
    assert events[-1].json()["error"] == {"code": "PassError",
                                          "message": "fuse_gelu broke the graph"}
    assert [e for e in events if e.id is not None][-1].json()["message"] == (
        "failed: PassError: fuse_gelu broke the graph")
    assert events[-1].json()["outcome"]["headline"] == (
        "Failed (PassError), nothing shipped (onnxruntime fp32 asked): fuse_gelu broke the "
        "graph.")


def test_events_of_an_unknown_job_are_404_json(client: TestClient) -> None:
    unknown = uuid.uuid4()
    response = client.get(f"/v1/jobs/{unknown}/events")

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == "JobNotFound"
    assert str(unknown) in response.json()["detail"]


@pytest.mark.parametrize("bad", ["seven", "-1", "1.5", "0x10", "9" * 30])
def test_a_malformed_last_event_id_is_400_naming_the_header(
        client: TestClient, finished_job_id: uuid.UUID, bad: str) -> None:
    response = client.get(f"/v1/jobs/{finished_job_id}/events", headers={"Last-Event-ID": bad})

    assert response.status_code == 400
    assert response.json()["error"] == "MalformedRequest"
    assert "Last-Event-ID" in response.json()["detail"] and repr(bad[:40]) in response.json()["detail"]


def test_a_malformed_after_query_is_400_naming_it(client: TestClient,
                                                  finished_job_id: uuid.UUID) -> None:
    response = client.get(f"/v1/jobs/{finished_job_id}/events", params={"after": "last"})

    assert response.status_code == 400
    assert "'after'" in response.json()["detail"]


@pytest.fixture
def quick_streams(client: TestClient, settings: Settings) -> HttpSettings:
    """Streams that poll every 20 ms, beat after 100 ms of silence and end after 600 ms."""
    settings.http = HttpSettings(events_poll_s=0.02, events_heartbeat_s=0.1, events_max_s=0.6)
    return settings.http


def test_a_quiet_stream_beats_and_ends_at_its_limit_saying_where_to_resume(
        client: TestClient, job_id: uuid.UUID, quick_streams: HttpSettings) -> None:
    started = time.monotonic()
    events = _events(client, job_id)

    assert 0.6 <= time.monotonic() - started < 5
    assert [e.event for e in events if e.id is not None] == ["status"]  # "queued"
    assert any(e.comments == ["keep-alive"] for e in events)
    timeout = events[-1]
    assert timeout.event == "timeout"
    assert timeout.json()["last_event_id"] == int(events[0].id or 0)
    assert f"Last-Event-ID: {events[0].id}" in timeout.json()["detail"]


def test_a_client_that_goes_away_stops_the_polling_and_keeps_no_session_open(
        client: TestClient, job_id: uuid.UUID, db_session: Session,
        quick_streams: HttpSettings) -> None:
    quick_streams.events_max_s = 60
    counts = {"opened": 0, "open": 0}
    lock = threading.Lock()

    @contextmanager
    def counted() -> Iterator[Session]:
        with lock:
            counts["opened"] += 1
            counts["open"] += 1
        try:
            yield db_session
        finally:
            with lock:
                counts["open"] -= 1

    client.app.dependency_overrides[get_read_sessions] = lambda: counted  # type: ignore[attr-defined]
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
        first = next(parse_sse(response.iter_bytes()))
        assert first.event == "status"
        # it polls while the client listens (more than twice in 0.2 s, as it always was)
        wait_until(lambda: counts["opened"] > 2, 0.2, interval_s=0.02,
                   what="the stream to read the job more than twice")

    time.sleep(0.1)  # a read in flight when the client left finishes
    opened = counts["opened"]
    time.sleep(0.3)  # kept: the claim is that nothing is read for a while after the client left
    assert counts["opened"] == opened and counts["open"] == 0


def test_openapi_documents_the_stream_and_its_event_types(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/events"]["get"]

    ok = operation["responses"]["200"]
    assert list(ok["content"]) == ["text/event-stream"]
    for event_type in ("stage", "status", "progress", "log", "end", "timeout"):
        assert f"`{event_type}`" in ok["description"]
    assert {"400", "404"} <= set(operation["responses"])
    parameters = {p["name"]: p["in"] for p in operation["parameters"]}
    assert parameters["last-event-id"] == "header" and parameters["after"] == "query"
