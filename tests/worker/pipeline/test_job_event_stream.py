"""GET /v1/jobs/{id}/events followed while a real worker (embedded, on the Redis broker) runs the
job, on SQLite and PostgreSQL: stages in order, increasing ids, the final state last, and a
reconnect with Last-Event-ID that gets exactly the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.settings import HttpSettings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.sse import ServerSentEvent, parse_sse

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
STAGES = ["load", "optimize", "build_engine", "validate", "benchmark", "profile", "store"]


@pytest.fixture(autouse=True)
def quick_polls(embedded: EmbeddedWorker) -> Iterator[None]:
    """Streams that poll every 20 ms: at the default 0.5 s a small job can go from queued to
    succeeded between two polls on a fast host, and the stream would never show it running."""
    settings = embedded.runtime.settings
    default, settings.http = settings.http, HttpSettings(events_poll_s=0.02)
    yield
    settings.http = default


def _submit(embedded: EmbeddedWorker, seed: int) -> str:
    model_id = embedded.upload(model_bytes(small_cnn(seed=seed)), "cnn.onnx")
    return embedded.submit(model_id, benchmark=FAST_BENCHMARK)


def _follow(embedded: EmbeddedWorker, job_id: str, *, last_event_id: str | None = None,
            until_event: str | None = None) -> list[ServerSentEvent]:
    """The job's events to the end of the stream, or up to the first `until_event` event (the
    client then hangs up)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    events = []
    with embedded.client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers,
                                timeout=240) as response:
        assert response.status_code == 200, response.read()
        for event in parse_sse(response.iter_bytes()):
            events.append(event)
            if event.event == until_event:
                break
    return events


def _stored(events: list[ServerSentEvent]) -> list[tuple[int, str, str]]:
    return [(int(e.id), e.event, e.json()["message"]) for e in events if e.id is not None]


def test_a_running_job_streams_its_stages_in_order_and_ends_with_its_final_state(
        embedded: EmbeddedWorker) -> None:
    job_id = _submit(embedded, seed=31)

    events = _follow(embedded, job_id)

    stored = _stored(events)
    ids = [event_id for event_id, _, _ in stored]
    assert ids == sorted(set(ids))
    assert [m.split()[1] for _, kind, m in stored if kind == "stage"] == STAGES
    assert stored[0][1:] == ("status", "queued") and stored[-1][1:] == ("status", "succeeded")
    # The stream saw the job run: its state went by as it changed, not only at the end.
    states = [e.json() for e in events if e.event in ("status", "progress") and e.id is None]
    assert any(s["status"] == "running" for s in states)
    assert [s["progress"] for s in states] == sorted(s["progress"] for s in states)
    assert events[-1].event == "end" and events[-1].json()["status"] == "succeeded"
    assert events[-1].json()["progress"] == 1.0
    # Everything the job document lists, nothing else.
    assert [m for _, _, m in stored] == [e["message"] for e in embedded.job(job_id)["events"]]


def test_reconnecting_mid_run_with_last_event_id_gets_exactly_the_rest(
        embedded: EmbeddedWorker) -> None:
    job_id = _submit(embedded, seed=32)

    before = _follow(embedded, job_id, until_event="stage")  # hangs up at the first stage
    last_seen = [e.id for e in before if e.id is not None][-1]
    after = _follow(embedded, job_id, last_event_id=last_seen)

    assert after[-1].event == "end" and after[-1].json()["status"] == "succeeded"
    whole = _follow(embedded, job_id)  # the finished job, from the start
    assert _stored(before) + _stored(after) == _stored(whole)
    assert [m.split()[1] for _, kind, m in _stored(after) if kind == "stage"] == STAGES[1:]


def test_a_finished_job_streams_from_a_middle_id_and_closes(embedded: EmbeddedWorker) -> None:
    job_id = _submit(embedded, seed=33)
    embedded.wait(job_id)
    whole = _stored(_follow(embedded, job_id))
    middle = whole[len(whole) // 2][0]

    rest = _follow(embedded, job_id, last_event_id=str(middle))

    assert _stored(rest) == [event for event in whole if event[0] > middle]
    assert [e.event for e in rest if e.id is None] == ["status", "end"]
