"""TensorRT jobs go to a GPU queue (a GPU's own queue with target_gpu); with no online worker
consuming that queue the job is still accepted and queued, with a status detail naming what is
missing."""

import base64
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db import job_state
from core.db.types import utc_now
from core.db.worker_registry import record_heartbeat, record_stopped
from optimizer.capabilities import GpuInfo, HostCapabilities
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.worker_heartbeats import H200

A100 = HostCapabilities(gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", "8.0", 81920),), tensorrt_version="10.16.1")


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _job_ids_in(broker: redis.Redis, queue: str) -> list[str]:
    ids = []
    for raw in broker.lrange(queue, 0, -1):
        message: dict[str, Any] = json.loads(raw)
        assert message["headers"]["task"] == "jobs.run"
        args, _kwargs, _ = json.loads(base64.b64decode(message["body"]))
        ids.append(args[0])
    return ids


def _online(session: Session, name: str, capabilities: HostCapabilities, queues: list[str]) -> None:
    record_heartbeat(session, name=name, queues=queues, capabilities=capabilities,
                     started_at=utc_now(), interval_s=30)
    session.commit()


def test_tensorrt_job_without_a_gpu_worker_is_queued_saying_none_is_online(
    client: TestClient, model_id: str, broker: redis.Redis
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt"})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued" and job["error"] is None
    detail = job["status_detail"]
    assert "no online worker can build TensorRT engines (an NVIDIA GPU and TensorRT)" in detail
    assert "(queue 'gpu')" in detail and "no GPU worker is online" in detail
    assert _job_ids_in(broker, "gpu") == [job["id"]]
    assert broker.llen("cpu") == 0
    assert job["events"][0]["message"] == f"queued; {detail}"
    listed = client.get("/v1/jobs").json()["items"]
    assert listed[0]["status_detail"] == detail


@pytest.mark.parametrize(
    ("target", "stored", "queue", "named"),
    [
        ("9.0", "9.0", "gpu.sm90", "a GPU of compute capability 9.0"),
        ("sm_90", "9.0", "gpu.sm90", "a GPU of compute capability 9.0"),
        ("H200", "H200", "gpu.h200", "a GPU 'H200'"),
    ],
)
def test_target_gpu_routes_to_that_gpus_queue_and_names_it_while_none_is_online(
    client: TestClient, model_id: str, broker: redis.Redis,
    target: str, stored: str, queue: str, named: str,
) -> None:
    job = client.post(
        "/v1/jobs", json={"model_id": model_id, "backend": "tensorrt", "target_gpu": target}
    ).json()
    assert job["config"]["target_gpu"] == stored
    assert _job_ids_in(broker, queue) == [job["id"]]
    assert broker.llen("gpu") == 0
    assert f"no online worker has {named} with TensorRT (queue {queue!r})" in job["status_detail"]


def test_online_worker_consuming_the_queue_leaves_no_status_detail(
    client: TestClient, db_session: Session, model_id: str, broker: redis.Redis
) -> None:
    _online(db_session, "celery@h200", H200, ["gpu", "gpu.sm90", "gpu.h200"])
    for target in (None, "9.0", "NVIDIA H200"):
        job = client.post(
            "/v1/jobs", json={"model_id": model_id, "backend": "tensorrt", "target_gpu": target}
        ).json()
        assert job["status"] == "queued" and job["status_detail"] is None, target
        assert [e["message"] for e in job["events"]] == ["queued"]


def test_detail_lists_the_gpu_workers_online_when_none_has_the_target(
    client: TestClient, db_session: Session, model_id: str
) -> None:
    _online(db_session, "celery@a100", A100, ["gpu", "gpu.sm80", "gpu.a100-sxm4-80gb"])
    _online(db_session, "celery@cpu", HostCapabilities(), ["cpu"])
    job = client.post(
        "/v1/jobs", json={"model_id": model_id, "backend": "tensorrt", "target_gpu": "9.0"}
    ).json()
    assert job["status_detail"].startswith(
        "waiting for a worker: no online worker has a GPU of compute capability 9.0 with TensorRT "
        "(queue 'gpu.sm90'); online GPU workers: celery@a100 (NVIDIA A100-SXM4-80GB, compute "
        "capability 8.0, TensorRT 10.16.1)."
    )


def test_stopped_or_expired_workers_do_not_count(
    client: TestClient, db_session: Session, model_id: str
) -> None:
    record_heartbeat(db_session, name="celery@gone", queues=["gpu"], capabilities=H200,
                     started_at=utc_now(), interval_s=30, now=utc_now() - timedelta(minutes=5))
    _online(db_session, "celery@stopped", H200, ["gpu"])
    record_stopped(db_session, "celery@stopped")
    db_session.commit()
    job = client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt"}).json()
    assert "no GPU worker is online" in job["status_detail"]


def test_status_detail_is_hidden_once_a_worker_claims_the_job(
    client: TestClient, db_session: Session, model_id: str
) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt"}).json()["id"]
    assert job_state.claim(db_session, uuid.UUID(job_id), "celery@h200") is not None
    db_session.commit()
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "running" and job["status_detail"] is None


def test_onnxruntime_job_goes_to_cpu_with_no_status_detail(
    client: TestClient, model_id: str, broker: redis.Redis
) -> None:
    job = client.post("/v1/jobs", json={"model_id": model_id}).json()
    assert job["status_detail"] is None and job["config"]["target_gpu"] is None
    assert _job_ids_in(broker, "cpu") == [job["id"]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"target_gpu": "9.0"}, "target_gpu: applies to backend 'tensorrt' only; backend "
         "'onnxruntime' runs on CPU workers"),
        ({"backend": "tensorrt", "target_gpu": "--"}, "target_gpu"),
        ({"backend": "tensorrt", "target_gpu": ""}, "target_gpu"),
        ({"backend": "tensorrt", "target_gpu": "x" * 65}, "target_gpu"),
    ],
)
def test_bad_target_gpu_is_422_and_nothing_is_sent(
    client: TestClient, model_id: str, broker: redis.Redis, body: dict[str, str], message: str
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, **body})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert broker.llen("cpu") == broker.llen("gpu") == 0


def test_ort_optimization_level_on_a_tensorrt_job_is_422(
    client: TestClient, model_id: str, broker: redis.Redis
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt",
                                             "ort_optimization_level": "basic"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(
        "ort_optimization_level: applies to backend 'onnxruntime' only")
    assert broker.llen("gpu") == 0


def test_ort_flush_denormals_on_a_tensorrt_job_is_422(
    client: TestClient, model_id: str, broker: redis.Redis
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt",
                                             "ort_flush_denormals": False})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(
        "ort_flush_denormals: applies to backend 'onnxruntime' only")
    assert broker.llen("gpu") == 0


def test_an_onnxruntime_job_leaves_denormal_flushing_to_the_engine_unless_told(
    client: TestClient, model_id: str
) -> None:
    default = client.post("/v1/jobs", json={"model_id": model_id})
    told = client.post("/v1/jobs", json={"model_id": model_id, "ort_flush_denormals": False})
    assert default.status_code == told.status_code == 202, (default.text, told.text)
    assert default.json()["config"]["ort_flush_denormals"] is None  # decided by the build
    assert told.json()["config"]["ort_flush_denormals"] is False
