"""At start-up a worker fits the GPU queues it was asked for to its host, each GPU backend on its
own, and logs which backend's jobs it leaves queued and why."""

import logging
from types import SimpleNamespace

import pytest
from celery import Celery

from tests.support.fake_gpu_backend import FAKE_GPU_ONLY, TENSORRT_ONLY, plant_fake_gpu_backend
from worker import celery_app as worker_app
from worker.celery_app import _choose_queues


def _chosen(monkeypatch: pytest.MonkeyPatch, asked: list[str], host: object) -> list[str]:
    monkeypatch.setattr(worker_app, "current_runtime", lambda: SimpleNamespace(capabilities=host))
    app = Celery("queue-choice", broker="memory://", set_as_current=False)
    app.amqp.queues.select(asked)
    _choose_queues("celery@test", SimpleNamespace(app=app))
    return sorted(app.amqp.queues.consume_from)


@pytest.fixture(autouse=True)
def fake_gpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    plant_fake_gpu_backend(monkeypatch)


def test_a_tensorrt_host_keeps_tensorrts_queues_and_drops_the_other_backends(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="worker.celery_app"):
        chosen = _chosen(monkeypatch, ["cpu", "gpu", "fakegpu"], TENSORRT_ONLY)
    assert chosen == ["cpu", "gpu", "gpu.h200", "gpu.sm90", "webhooks"]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "worker celery@test will not consume fakegpu: it cannot build FakeGPU engines"]


def test_a_host_of_the_other_gpu_backend_drops_tensorrts_queues(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="worker.celery_app"):
        chosen = _chosen(monkeypatch, ["gpu", "gpu.sm90", "fakegpu"], FAKE_GPU_ONLY)
    assert chosen == ["fakegpu", "fakegpu.h200", "fakegpu.sm90", "webhooks"]
    message = caplog.records[0].getMessage()
    assert message.startswith("worker celery@test will not consume gpu, gpu.sm90: it cannot "
                              "build TensorRT engines (")
    assert message.endswith("TensorRT jobs stay queued for a worker that can.")
