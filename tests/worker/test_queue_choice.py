"""At start-up a worker fits the GPU queues it was asked for to its host, each GPU backend on its
own, and logs which backend's jobs it leaves queued and why: at INFO, since a host without a
backend's GPU is an expected state, and at WARNING only when that leaves it no job queue."""

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery import Celery

from tests.support.fake_gpu_backend import FAKE_GPU_ONLY, TENSORRT_ONLY, fake_gpu_registered
from worker import celery_app as worker_app
from worker.celery_app import _choose_queues


def _chosen(monkeypatch: pytest.MonkeyPatch, asked: list[str], host: object) -> list[str]:
    monkeypatch.setattr(worker_app, "current_runtime", lambda: SimpleNamespace(capabilities=host))
    app = Celery("queue-choice", broker="memory://", set_as_current=False)
    app.amqp.queues.select(asked)
    _choose_queues("celery@test", SimpleNamespace(app=app))
    return sorted(app.amqp.queues.consume_from)


@pytest.fixture(autouse=True)
def fake_gpu_backend() -> Iterator[None]:
    with fake_gpu_registered():
        yield


def test_a_tensorrt_host_keeps_tensorrts_queues_and_drops_the_other_backends(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="worker.celery_app"):
        chosen = _chosen(monkeypatch, ["cpu", "gpu", "fakegpu"], TENSORRT_ONLY)
    assert chosen == ["cpu", "gpu", "gpu.h200", "gpu.sm90", "webhooks"]
    dropped = [r for r in caplog.records if "takes no" in r.getMessage()]
    assert [(r.levelname, r.getMessage().split(" (")[0]) for r in dropped] == [
        ("INFO", "worker celery@test takes no FakeGPU jobs: this host cannot build FakeGPU "
                 "engines")]


def test_a_host_of_the_other_gpu_backend_drops_tensorrts_queues(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="worker.celery_app"):
        chosen = _chosen(monkeypatch, ["gpu", "gpu.sm90", "fakegpu"], FAKE_GPU_ONLY)
    assert chosen == ["fakegpu", "fakegpu.h200", "fakegpu.sm90", "webhooks"]
    record = caplog.records[0]
    assert record.levelname == "INFO"
    assert record.getMessage().startswith(
        "worker celery@test takes no TensorRT jobs: this host cannot build TensorRT engines "
        "(its capabilities: ")
    assert record.getMessage().endswith(
        "They wait in queue gpu, gpu.sm90 for a worker that can.")


def test_a_worker_left_with_no_job_queue_warns(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Started for TensorRT's queue alone on a host without TensorRT: a misconfiguration, not
    the expected CPU host, so a warning (still not an error: webhooks are delivered)."""
    with caplog.at_level(logging.INFO, logger="worker.celery_app"):
        chosen = _chosen(monkeypatch, ["gpu"], FAKE_GPU_ONLY)
    assert chosen == ["webhooks"]
    [record] = [r for r in caplog.records if "takes no" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert record.getMessage().endswith("this worker was given no other job queue, so it only "
                                        "delivers webhooks.")
