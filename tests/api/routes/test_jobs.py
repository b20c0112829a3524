"""Starting, reading, listing and cancelling jobs; bad configs refused with nothing stored."""

import base64
import json
import uuid
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.db.models import Job
from tests.models import model_bytes, small_cnn


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _queued_messages(broker: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in broker.lrange(queue, 0, -1)]


def test_create_job_is_202_queued_and_sends_only_the_job_id(
    client: TestClient, model_id: str, broker: redis.Redis
) -> None:
    response = client.post(
        "/v1/jobs",
        json={"model_id": model_id, "backend": "onnxruntime", "precision": "fp32",
              "input_shapes": {"input": [8, 3, 32, 32]}},
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued" and job["progress"] == 0
    assert job["config"]["input_shapes"] == {"input": [8, 3, 32, 32]}

    [message] = _queued_messages(broker, "cpu")
    assert message["headers"]["task"] == "jobs.run"
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([job["id"]], {})


def test_dynamic_dims_default_to_one(client: TestClient, model_id: str) -> None:
    job = client.post("/v1/jobs", json={"model_id": model_id}).json()
    assert job["config"]["input_shapes"] == {"input": [1, 3, 32, 32]}
    assert job["config"]["ort_optimization_level"] == "all"


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.post("/v1/jobs", json={"model_id": str(uuid.uuid4())})
    assert response.status_code == 404
    assert response.json()["error"] == "ModelNotFound"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"backend": "tensorflow"}, "backend"),
        ({"precision": "int3"}, "precision"),
        ({"input_shapes": {"image": [1, 3, 32, 32]}}, "input_shapes.image"),
        ({"input_shapes": {"input": [1, 3, 32]}}, "input_shapes.input"),
        ({"input_shapes": {"input": [1, 3, 64, 64]}}, "input_shapes.input"),
        ({"input_shapes": {"input": [0, 3, 32, 32]}}, "input_shapes.input"),
        ({"validation": {"samples": 0}}, "validation.samples"),
        ({"benchmark": {"iterations": -1}}, "benchmark.iterations"),
        ({"optimisation": "max"}, "optimisation"),
    ],
)
def test_invalid_config_is_422_naming_the_field_and_nothing_is_stored(
    client: TestClient, db_session: Session, broker: redis.Redis, model_id: str,
    change: dict[str, Any], field: str,
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, **change})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(field) or f"{field}:" in response.json()["detail"]
    assert db_session.scalar(select(func.count()).select_from(Job)) == 0
    assert broker.llen("cpu") == 0


def test_cancel_queued_job_then_cancel_again_is_409(client: TestClient, model_id: str) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert "already cancelled" in again.json()["detail"]


def test_unknown_job_is_404_everywhere(client: TestClient) -> None:
    unknown = uuid.uuid4()
    for method, path in (
        ("GET", f"/v1/jobs/{unknown}"),
        ("POST", f"/v1/jobs/{unknown}/cancel"),
        ("GET", f"/v1/jobs/{unknown}/artifacts/engine.onnx"),
    ):
        response = client.request(method, path)
        assert response.status_code == 404, path
        assert response.json()["error"] == "JobNotFound"


def test_artifact_of_queued_job_is_404_saying_why(client: TestClient, model_id: str) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
    response = client.get(f"/v1/jobs/{job_id}/artifacts/engine.onnx")
    assert response.status_code == 404
    assert "the job is queued" in response.json()["detail"]


def test_jobs_are_listed_newest_first_and_filter_by_status(client: TestClient, model_id: str) -> None:
    ids = [client.post("/v1/jobs", json={"model_id": model_id}).json()["id"] for _ in range(3)]
    client.post(f"/v1/jobs/{ids[0]}/cancel")
    listed = client.get("/v1/jobs?limit=2").json()
    assert listed["total"] == 3
    assert [j["id"] for j in listed["items"]] == [ids[2], ids[1]]
    queued = client.get("/v1/jobs?status=queued").json()
    assert {j["id"] for j in queued["items"]} == {ids[1], ids[2]}
    assert client.get("/v1/jobs?status=bogus").status_code == 422


def test_job_events_record_its_timeline(client: TestClient, model_id: str) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
    client.post(f"/v1/jobs/{job_id}/cancel")
    events = client.get(f"/v1/jobs/{job_id}").json()["events"]
    assert [e["message"] for e in events] == ["queued", "cancelled by request"]
