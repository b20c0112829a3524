"""Starting, reading, listing and cancelling jobs; bad configs (shapes, ranges, datasets)
refused with nothing stored."""

import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import onnx
import pytest
import redis
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Artifact, Job
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.npz_files import npz_bytes


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
        ({"benchmark": {"batch_sizes": [0, 2]}}, "benchmark.batch_sizes"),
        ({"benchmark": {"batch_sizes": [4097]}}, "benchmark.batch_sizes"),
        ({"benchmark": {"batch_sizes": [2, 2]}}, "benchmark.batch_sizes"),
        ({"benchmark": {"batch_sizes": list(range(1, 18))}}, "benchmark.batch_sizes"),
        ({"benchmark": {"batch_sizes": []}}, "benchmark.batch_sizes"),
        ({"benchmark": {"warmup_cv_threshold": 0}}, "benchmark.warmup_cv_threshold"),
        ({"benchmark": {"max_warmup": 1001}}, "benchmark.max_warmup"),
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


def test_an_expired_artifact_is_410_and_listed_as_expired(
        client: TestClient, db_session: Session, model_id: str) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
    job = db_session.get_one(Job, uuid.UUID(job_id))
    job.status = "succeeded"
    expired_at = datetime(2026, 12, 1, tzinfo=UTC)
    db_session.add(Artifact(job_id=job.id, name="engine.onnx", kind="engine",
                            uri=f"store://jobs/{job_id}/engine.onnx", sha256="0" * 64,
                            size_bytes=6, expired_at=expired_at))
    db_session.commit()

    response = client.get(f"/v1/jobs/{job_id}/artifacts/engine.onnx")

    assert response.status_code == 410, response.text
    assert response.json()["error"] == "ArtifactExpired"
    assert "removed on 2026-12-01" in response.json()["detail"]
    [listed] = client.get(f"/v1/jobs/{job_id}").json()["artifacts"]
    assert datetime.fromisoformat(listed["expired_at"]) == expired_at


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


def _upload_dataset(client: TestClient, **arrays: Any) -> str:
    response = client.post("/v1/datasets", files={"file": ("data.npz", npz_bytes(**arrays))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _images(samples: int, *sample_shape: int, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(samples)
    return rng.standard_normal((samples, *sample_shape)).astype(dtype)


def _token_model() -> onnx.ModelProto:
    """ids int64 [N, seq] and mask float32 [N, seq] -> embedding(ids) * mask, [N, seq, 4]."""
    table = np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["embedded"]),
            helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
            helper.make_node("Mul", ["embedded", "mask3"], ["out"]),
        ],
        "tokens",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", "seq"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", "seq", 4])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def token_model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("tok.onnx", model_bytes(_token_model()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _assert_no_job(db_session: Session, broker: redis.Redis) -> None:
    assert db_session.scalar(select(func.count()).select_from(Job)) == 0
    assert broker.llen("cpu") == 0


def test_job_with_dataset_runs_at_the_sample_shape_and_records_the_dataset(
    client: TestClient, db_session: Session, model_id: str
) -> None:
    dataset_id = _upload_dataset(client, input=_images(4, 2, 3, 32, 32),
                                 labels=np.arange(4) % 10)
    response = client.post("/v1/jobs", json={"model_id": model_id, "dataset_id": dataset_id})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["config"]["dataset_id"] == dataset_id
    assert job["config"]["input_shapes"] == {"input": [2, 3, 32, 32]}
    assert client.get(f"/v1/jobs/{job['id']}").json()["config"]["dataset_id"] == dataset_id
    row = db_session.get(Job, uuid.UUID(job["id"]))
    assert row is not None and str(row.dataset_id) == dataset_id


def test_job_with_dataset_and_the_same_explicit_shape_is_accepted(
    client: TestClient, model_id: str
) -> None:
    dataset_id = _upload_dataset(client, input=_images(2, 8, 3, 32, 32))
    response = client.post("/v1/jobs", json={
        "model_id": model_id, "dataset_id": dataset_id, "input_shapes": {"input": [8, 3, 32, 32]}})
    assert response.status_code == 202, response.text
    assert response.json()["config"]["input_shapes"] == {"input": [8, 3, 32, 32]}


@pytest.mark.parametrize(
    ("arrays", "change", "expected"),
    [
        ({"image": _images(2, 1, 3, 32, 32)}, {}, "no array for input(s) 'input'"),
        ({"input": _images(2, 1, 3, 32, 32), "extra": _images(2, 4)}, {},
         "array(s) 'extra' are not model inputs"),
        ({"input": _images(2, 1, 3, 32, 32, dtype=np.float64)}, {},
         "array 'input' is float64 but model input 'input' takes float32"),
        # the sample axis used as the batch axis: each sample lacks the model's batch dim
        ({"input": _images(2, 3, 32, 32)}, {}, "needs shape [samples, N, 3, 32, 32]"),
        ({"input": _images(2, 1, 3, 28, 28)}, {}, "samples of shape [1, 3, 28, 28]"),
        ({"input": _images(2, 1, 3, 32, 32)}, {"input_shapes": {"input": [4, 3, 32, 32]}},
         "input_shapes sets input 'input' to [4, 3, 32, 32]"),
    ],
    ids=["missing-input", "extra-array", "dtype", "no-batch-dim", "spatial-dims",
         "contradicts-input-shapes"],
)
def test_job_with_mismatching_dataset_is_422_naming_dataset_id_and_the_input(
    client: TestClient, db_session: Session, broker: redis.Redis, model_id: str,
    arrays: dict[str, np.ndarray], change: dict[str, Any], expected: str,
) -> None:
    dataset_id = _upload_dataset(client, **arrays)
    response = client.post("/v1/jobs", json={"model_id": model_id, "dataset_id": dataset_id, **change})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidJobConfig"
    assert body["detail"].startswith(f"dataset_id: dataset {dataset_id}")
    assert expected in body["detail"]
    _assert_no_job(db_session, broker)


def test_dataset_disagreeing_on_a_shared_dim_is_422(
    client: TestClient, db_session: Session, broker: redis.Redis, token_model_id: str
) -> None:
    dataset_id = _upload_dataset(client, ids=np.zeros((3, 1, 8), np.int64),
                                 mask=np.ones((3, 1, 6), np.float32))
    response = client.post("/v1/jobs", json={"model_id": token_model_id, "dataset_id": dataset_id})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("dataset_id:")
    assert "dim 'seq' is 8 in input 'ids' but 6 in input 'mask'" in response.json()["detail"]
    _assert_no_job(db_session, broker)


def test_unknown_dataset_is_404_and_nothing_is_stored(
    client: TestClient, db_session: Session, broker: redis.Redis, model_id: str
) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "dataset_id": str(uuid.uuid4())})
    assert response.status_code == 404, response.text
    assert response.json()["error"] == "DatasetNotFound"
    _assert_no_job(db_session, broker)


def test_input_ranges_are_stored_with_the_job(client: TestClient, token_model_id: str) -> None:
    ranges = {"ids": [0, 16], "mask": [0.0, 1.0]}
    response = client.post("/v1/jobs", json={"model_id": token_model_id, "input_ranges": ranges})
    assert response.status_code == 202, response.text
    assert response.json()["config"]["input_ranges"] == ranges
    assert response.json()["config"]["dataset_id"] is None


@pytest.mark.parametrize(
    ("ranges", "field", "expected"),
    [
        ({"tokens": [0, 16]}, "input_ranges.tokens", "no input 'tokens'"),
        ({"ids": [16, 0]}, "input_ranges.ids", "low 16.0 must be below high 0.0"),
        ({"mask": [1, 1]}, "input_ranges.mask", "must be below"),
        ({"mask": [0, float("inf")]}, "input_ranges.mask", "not finite"),
        ({"ids": [0, 15.5]}, "input_ranges.ids", "bounds are whole numbers, e.g. [0, 16)"),
        ({"ids": [0, 2.0**64]}, "input_ranges.ids", "goes beyond"),
        ({"mask": [0, 1e39]}, "input_ranges.mask", "largest magnitude"),
        ({"ids": [0, 1, 2]}, "input_ranges.ids", "at most 2"),
    ],
    ids=["unknown-input", "reversed", "empty", "infinite", "fractional-int", "int64-overflow",
         "float32-overflow", "three-bounds"],
)
def test_invalid_input_ranges_are_422_naming_the_input(
    client: TestClient, db_session: Session, broker: redis.Redis, token_model_id: str,
    ranges: dict[str, list[float]], field: str, expected: str,
) -> None:
    # Python's json writes (and reads) Infinity, which httpx's json= refuses to send.
    body = json.dumps({"model_id": token_model_id, "input_ranges": ranges})
    response = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{field}:")
    assert expected in response.json()["detail"]
    _assert_no_job(db_session, broker)


def test_bf16_on_onnxruntime_is_422_saying_which_backend_can(client: TestClient, model_id: str) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "precision": "bf16"})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("precision: bf16 needs backend 'tensorrt'")


def test_precision_search_at_fp32_is_422(client: TestClient, model_id: str) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "precision_search": True})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("precision_search: there is nothing to search")


def test_accuracy_budget_is_checked(client: TestClient, model_id: str) -> None:
    response = client.post("/v1/jobs", json={
        "model_id": model_id, "precision": "fp16", "precision_search": True,
        "accuracy_budget": {"min_cosine": 1.5}})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("accuracy_budget.min_cosine")
