"""A real worker asked for cpu and gpu queues on a host without a GPU: it records its capabilities
("none") with a heartbeat, drops the GPU queues, so a TensorRT job stays queued saying why while
CPU jobs still run, and it is marked stopped when it shuts down."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from core.db.models import Worker
from core.db.session import make_engine
from optimizer.capabilities import detect_capabilities
from optimizer.testing.models import model_bytes, small_cnn
from tests.e2e.flows import assert_optimize_flow_succeeds, upload
from tests.e2e.stacks import running_stack
from tests.support.broker import redis_url

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        detect_capabilities().can_build_tensorrt,
        reason="this host can build TensorRT engines; the test needs one that cannot",
    ),
]

E2E_REDIS_URL = redis_url("e2e-gpu-routing")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with running_stack(tmp_path_factory.mktemp("e2e-gpu"), name="gpu", redis_url=E2E_REDIS_URL,
                       queues="cpu,gpu", FUSEFORGE_JOBS__HEARTBEAT_INTERVAL_S="1") as running:
        engine = make_engine(running.database_url)
        try:
            yield {"base_url": running.base_url, "broker": redis.Redis.from_url(E2E_REDIS_URL),
                   "engine": engine, "worker": running.worker}
        finally:
            engine.dispose()


def _worker_row(engine: Engine, timeout_s: float = 60.0) -> Worker:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Session(engine) as session:
            row = session.scalars(select(Worker)).one_or_none()
            if row is not None:
                return row
        time.sleep(0.2)
    raise AssertionError("the worker never recorded itself in the workers table")


def test_worker_records_no_gpu_and_consumes_no_gpu_queue(stack: dict[str, Any]) -> None:
    row = _worker_row(stack["engine"])
    assert row.queues == ["cpu", "webhooks"]  # every worker delivers webhooks
    assert row.gpu_name is None and row.tensorrt_version is None
    assert row.capabilities["gpus"] == []
    assert row.stopped_at is None and row.expires_at > row.heartbeat_at
    assert "takes no TensorRT jobs: this host cannot build TensorRT engines" \
        in stack["worker"].output()


def test_tensorrt_job_stays_queued_with_a_detail_while_cpu_jobs_run(stack: dict[str, Any]) -> None:
    base_url = stack["base_url"]
    _worker_row(stack["engine"])
    uploaded = upload(base_url, model_bytes(small_cnn(seed=4)), "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs", json={"model_id": uploaded["id"], "backend": "tensorrt"}, timeout=30
    )
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    assert "no online worker can build TensorRT engines" in created.json()["status_detail"]

    assert_optimize_flow_succeeds(base_url)  # the worker is busy with CPU work meanwhile
    job = httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=10).json()
    assert job["status"] == "queued" and job["attempts"] == 0
    assert "no GPU worker is online" in job["status_detail"]
    assert stack["broker"].llen("gpu") == 1


def test_worker_is_marked_stopped_on_shutdown(stack: dict[str, Any]) -> None:
    before = _worker_row(stack["engine"])
    assert stack["worker"].stop() == 0
    with Session(stack["engine"]) as session:
        row = session.get(Worker, before.name)
        assert row is not None and row.stopped_at is not None
        assert row.heartbeat_at >= before.heartbeat_at
