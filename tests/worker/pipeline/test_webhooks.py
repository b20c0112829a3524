"""Webhooks end to end: the embedded worker runs the job, then POSTs its signed JSON to a real
HTTP receiver on 127.0.0.1 (allowed by the settings), retrying what may pass on a retry and
recording every attempt on the job."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from api.deps import get_api_settings
from core.settings import Settings, WebhookSettings
from fuseforge_client.webhooks import verify_signature
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker
from worker.runtime import use_runtime

SECRET = "test-webhook-secret-" + "0" * 32
FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
IMPOSSIBLE = {"atol": 1e-12, "rtol": 0, "samples": 2}  # fused arithmetic never meets this
_SETTLE_TIMEOUT_S = 60


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A webhook receiver: answers each POST with the next scripted status (then 200)."""

    url: str
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    received: list[Delivery] = field(default_factory=list)

    def answer(self, *statuses: int | tuple[int, dict[str, str]]) -> None:
        self.answers.extend(s if isinstance(s, tuple) else (s, {}) for s in statuses)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                state.received.append(Delivery(self.path, dict(self.headers.items()), body))
                status, headers = state.answers.pop(0) if state.answers else (200, {})
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/fuseforge"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def hooks(embedded: EmbeddedWorker) -> Iterator[Settings]:
    """The API and the worker with a known secret, loopback allowed and quick retries."""
    settings = embedded.runtime.settings.model_copy(update={"webhooks": WebhookSettings(
        secret=SECRET, allowed_networks=["127.0.0.0/8"], first_retry_s=0.2, max_retry_s=0.5,
        timeout_s=5)})
    overrides = embedded.client.app.dependency_overrides  # type: ignore[attr-defined]
    previous = overrides[get_api_settings]
    overrides[get_api_settings] = lambda: settings
    try:
        with use_runtime(replace(embedded.runtime, settings=settings)):
            yield settings
    finally:
        overrides[get_api_settings] = previous


def _settled(embedded: EmbeddedWorker, job_id: str, attempts: int = 1) -> dict[str, Any]:
    """The job once it ended and its webhook had `attempts` attempts, the last one final."""
    job = embedded.wait(job_id)
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while len(job["webhook_deliveries"]) < attempts:
        assert time.monotonic() < deadline, f"webhook of job {job_id} not settled: {job}"
        time.sleep(0.05)
        job = embedded.job(job_id)
    time.sleep(0.3)  # long enough for a retry that should not come to show up
    return embedded.job(job_id)


def _signed_json(delivery: Delivery) -> dict[str, Any]:
    verify_signature(SECRET, delivery.headers["FuseForge-Signature"], delivery.body)
    return json.loads(delivery.body)  # type: ignore[no-any-return]


def _attempts(job: dict[str, Any]) -> list[tuple[int, int | None]]:
    return [(d["attempt"], d["status_code"]) for d in job["webhook_deliveries"]]


def test_a_succeeded_job_posts_its_signed_json_to_the_callback(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=61)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=receiver.url)
    job = _settled(embedded, job_id)

    assert job["status"] == "succeeded", job["error"]
    [delivery] = receiver.received
    assert delivery.path == "/hooks/fuseforge"
    assert delivery.headers["FuseForge-Event"] == "job.succeeded"
    assert delivery.headers["Content-Type"] == "application/json"
    sent = _signed_json(delivery)
    assert sent["id"] == job_id and sent["status"] == "succeeded"
    assert sent["config"]["callback_url"] == receiver.url
    assert {a["name"] for a in sent["artifacts"]} == {a["name"] for a in job["artifacts"]}
    assert _attempts(job) == [(1, 200)]
    assert job["webhook_deliveries"][0]["error"] is None
    assert job["webhook_deliveries"][0]["event"] == "job.succeeded"
    [engine] = [b for b in job["benchmarks"]
                if b["suite"] == "comparison" and b["variant"] == "engine"]
    assert sent["speedup_verdict"] == engine["speedup_verdict"]
    assert sent["regression"] is None  # the model's first job: nothing earlier to be slower than
    assert sent["outcome"] == job["outcome"] and sent["outcome"]["headline"]


def test_a_failed_job_posts_its_signed_json_with_the_error(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=62)), "cnn.onnx")
    job_id = embedded.submit(model_id, validation=IMPOSSIBLE, benchmark=FAST_BENCHMARK,
                             callback_url=receiver.url)
    job = _settled(embedded, job_id)

    assert job["status"] == "failed"
    [delivery] = receiver.received
    assert delivery.headers["FuseForge-Event"] == "job.failed"
    sent = _signed_json(delivery)
    assert sent["status"] == "failed" and sent["error"]["code"] == "AccuracyMismatchError"
    assert _attempts(job) == [(1, 200)]


def test_a_receiver_answering_500_twice_gets_the_same_delivery_a_third_time(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    receiver.answer(500, 503)
    model_id = embedded.upload(model_bytes(small_cnn(seed=63)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=receiver.url)
    job = _settled(embedded, job_id, attempts=3)

    assert _attempts(job) == [(1, 500), (2, 503), (3, 200)]
    assert [d["error"] for d in job["webhook_deliveries"]] == [
        "the receiver answered 500", "the receiver answered 503", None]
    assert len(receiver.received) == 3
    assert len({d.headers["FuseForge-Delivery"] for d in receiver.received}) == 1
    assert all(_signed_json(d)["id"] == job_id for d in receiver.received)


def test_a_redirect_is_not_followed_and_the_attempt_says_so(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    elsewhere = receiver.url.replace("/hooks/fuseforge", "/elsewhere")
    receiver.answer((302, {"Location": elsewhere}))
    model_id = embedded.upload(model_bytes(small_cnn(seed=64)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=receiver.url)
    job = _settled(embedded, job_id)

    assert [d.path for d in receiver.received] == ["/hooks/fuseforge"]
    assert _attempts(job) == [(1, 302)]
    error = job["webhook_deliveries"][0]["error"]
    assert "redirects are not followed" in error and elsewhere in error


def test_a_4xx_answer_other_than_429_is_not_retried(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    receiver.answer(404)
    model_id = embedded.upload(model_bytes(small_cnn(seed=65)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=receiver.url)
    job = _settled(embedded, job_id)

    assert _attempts(job) == [(1, 404)] and len(receiver.received) == 1


def test_a_receiver_that_never_answers_is_tried_max_attempts_times(
        embedded: EmbeddedWorker, hooks: Settings) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model_id = embedded.upload(model_bytes(small_cnn(seed=66)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark=FAST_BENCHMARK,
                             callback_url=f"http://127.0.0.1:{port}/hook")
    job = _settled(embedded, job_id, attempts=hooks.webhooks.max_attempts)

    assert _attempts(job) == [(n, None) for n in range(1, hooks.webhooks.max_attempts + 1)]
    errors = [d["error"] for d in job["webhook_deliveries"]]
    assert all("ConnectError" in e for e in errors)
    assert errors[-1].endswith(f"gave up after {hooks.webhooks.max_attempts} attempts")


def test_cancelling_a_queued_job_posts_job_cancelled(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=67)), "cnn.onnx")
    # No worker here consumes this GPU's queue: the job stays queued until cancelled.
    job_id = embedded.submit(model_id, backend="tensorrt", target_gpu="7.5",
                             callback_url=receiver.url)
    assert embedded.job(job_id)["status"] == "queued"
    assert embedded.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = _settled(embedded, job_id)

    assert job["status"] == "cancelled"
    [delivery] = receiver.received
    assert delivery.headers["FuseForge-Event"] == "job.cancelled"
    assert _signed_json(delivery)["status"] == "cancelled"
    assert _attempts(job) == [(1, 200)]


def test_a_job_without_a_callback_url_posts_to_its_projects_default_webhook(
        embedded: EmbeddedWorker, hooks: Settings, receiver: Receiver) -> None:
    default = receiver.url.replace("/hooks/fuseforge", "/hooks/project-default")
    response = embedded.client.patch("/v1/project", json={"default_callback_url": default})
    assert response.status_code == 200, response.text
    try:
        model_id = embedded.upload(model_bytes(small_cnn(seed=68)), "cnn.onnx")
        defaulted = embedded.submit(model_id, benchmark=FAST_BENCHMARK)
        own = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=receiver.url)
        opted_out = embedded.submit(model_id, benchmark=FAST_BENCHMARK, callback_url=None)
        jobs = {job_id: _settled(embedded, job_id) for job_id in (defaulted, own)}
        silent = embedded.wait(opted_out)
    finally:
        embedded.client.patch("/v1/project", json={"default_callback_url": None})

    sent = {_signed_json(d)["id"]: d for d in receiver.received}
    assert sent.keys() == {defaulted, own}  # the opted-out job posted nothing
    assert sent[defaulted].path == "/hooks/project-default"
    assert sent[defaulted].headers["FuseForge-Event"] == "job.succeeded"
    assert json.loads(sent[defaulted].body)["config"]["callback_url"] == default
    assert sent[own].path == "/hooks/fuseforge"
    assert [_attempts(job) for job in jobs.values()] == [[(1, 200)], [(1, 200)]]
    assert silent["config"]["callback_url"] is None and silent["webhook_deliveries"] == []
