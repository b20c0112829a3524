"""Idempotency-Key on POST /v1/models, /v1/datasets and /v1/jobs: a repeat gets the first
answer back and creates nothing; another body is a 409; a key belongs to its project and route;
a failed request leaves no key behind. (Concurrent requests: test_idempotency_concurrency.py.)"""

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.deps import get_dispatcher
from core.db.models import Dataset, IdempotencyKey, Job, Model
from core.dispatch import JobDispatcher
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.npz_files import npz_bytes as arrays_npz

JOB_BODY = {"model_id": "", "backend": "onnxruntime", "input_shapes": {"input": [2, 3, 32, 32]}}


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def _count(db_session: Session, table: type[Any]) -> int:
    return int(db_session.scalar(select(func.count()).select_from(table)) or 0)


def npz_bytes(samples: int = 2) -> bytes:
    return arrays_npz(input=np.zeros((samples, 1, 3, 32, 32), np.float32))


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def test_a_retried_job_submit_makes_one_job_and_replays_the_first_answer(
        client: TestClient, db_session: Session, broker: redis.Redis, model_id: str) -> None:
    body = {**JOB_BODY, "model_id": model_id}
    first = client.post("/v1/jobs", json=body, headers=_keyed("submit-1"))
    again = client.post("/v1/jobs", json=body, headers=_keyed("submit-1"))

    assert first.status_code == again.status_code == 202, again.text
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert _count(db_session, Job) == 1
    assert broker.llen("cpu") == 1  # one Celery dispatch


def test_the_replay_is_the_stored_answer_even_after_the_job_moved_on(
        client: TestClient, model_id: str) -> None:
    body = {**JOB_BODY, "model_id": model_id}
    first = client.post("/v1/jobs", json=body, headers=_keyed("k"))
    assert client.post(f"/v1/jobs/{first.json()['id']}/cancel").status_code == 200

    again = client.post("/v1/jobs", json=body, headers=_keyed("k"))
    assert again.json()["status"] == "queued"  # as first answered, not as the job is now
    assert again.json() == first.json()


def test_the_same_json_written_another_way_is_the_same_request(
        client: TestClient, db_session: Session, model_id: str) -> None:
    first = client.post("/v1/jobs", headers={**_keyed("k"), "Content-Type": "application/json"},
                        content=f'{{"model_id": "{model_id}", "precision": "fp32"}}')
    again = client.post("/v1/jobs", headers={**_keyed("k"), "Content-Type": "application/json"},
                        content=f'{{"precision":"fp32",\n "model_id":"{model_id}"}}')
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert _count(db_session, Job) == 1


def test_the_same_key_with_another_body_is_409_and_creates_nothing(
        client: TestClient, db_session: Session, broker: redis.Redis, model_id: str) -> None:
    client.post("/v1/jobs", json={**JOB_BODY, "model_id": model_id}, headers=_keyed("k"))
    other = client.post("/v1/jobs", json={**JOB_BODY, "model_id": model_id, "precision": "fp16"},
                        headers=_keyed("k"))

    assert other.status_code == 409
    assert other.json()["error"] == "IdempotencyKeyReused"
    assert "Idempotency-Key 'k'" in other.json()["detail"]
    assert "another request body" in other.json()["detail"]
    assert _count(db_session, Job) == 1 and broker.llen("cpu") == 1


def test_without_a_key_every_post_runs(
        client: TestClient, db_session: Session, model_id: str) -> None:
    body = {**JOB_BODY, "model_id": model_id}
    assert client.post("/v1/jobs", json=body).status_code == 202
    assert client.post("/v1/jobs", json=body).status_code == 202
    assert _count(db_session, Job) == 2
    assert _count(db_session, IdempotencyKey) == 0


@pytest.mark.parametrize(("key", "problem"), [
    ("", "is empty"),
    ("k" * 256, "has 256 characters"),
    ("tab\there", "holds '\\t' at position 3"),
])
def test_a_bad_key_is_422_naming_the_header_and_nothing_is_stored(
        client: TestClient, db_session: Session, settings: Settings, model_id: str,
        key: str, problem: str) -> None:
    job = client.post("/v1/jobs", json={**JOB_BODY, "model_id": model_id}, headers=_keyed(key))
    upload = client.post("/v1/datasets", files={"file": ("d.npz", npz_bytes())},
                         headers=_keyed(key))

    for refused in (job, upload):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "InvalidIdempotencyKey"
        assert f"the Idempotency-Key header {problem}" in refused.json()["detail"]
    assert _count(db_session, Job) == 0 and _count(db_session, Dataset) == 0
    assert _files(settings.uploads_dir) == []


def test_a_key_of_255_printable_characters_is_accepted(client: TestClient, model_id: str) -> None:
    key = ("a b~!" * 51)[:255]
    response = client.post("/v1/jobs", json={**JOB_BODY, "model_id": model_id},
                           headers=_keyed(key))
    assert response.status_code == 202, response.text


def test_an_upload_replay_keeps_no_second_file_and_creates_no_second_model(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    data = model_bytes(small_cnn())
    first = client.post("/v1/models", files={"file": ("cnn.onnx", data)}, headers=_keyed("up"))
    stored = _files(settings.artifacts_dir)
    again = client.post("/v1/models", files={"file": ("cnn.onnx", data)}, headers=_keyed("up"))

    assert (first.status_code, again.status_code) == (201, 201)  # the first answer, replayed
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert _count(db_session, Model) == 1
    assert _files(settings.artifacts_dir) == stored and len(stored) == 1
    assert _files(settings.uploads_dir) == []  # the repeat's streamed copy is gone too


def test_an_upload_of_another_file_or_role_under_a_used_key_is_409_and_leaves_no_file(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    client.post("/v1/datasets", files={"file": ("d.npz", npz_bytes(samples=2))},
                headers=_keyed("up"))
    other = client.post("/v1/datasets", files={"file": ("d.npz", npz_bytes(samples=3))},
                        headers=_keyed("up"))
    renamed = client.post("/v1/datasets", files={"file": ("e.npz", npz_bytes(samples=2))},
                          headers=_keyed("up"))
    # The same file under another role is another request, not a replay of the first answer.
    recast = client.post("/v1/datasets", params={"role": "calibration"},
                         files={"file": ("d.npz", npz_bytes(samples=2))}, headers=_keyed("up"))

    assert other.status_code == renamed.status_code == recast.status_code == 409
    assert other.json()["error"] == "IdempotencyKeyReused"
    assert _count(db_session, Dataset) == 1
    assert len(_files(settings.artifacts_dir)) == 1 and _files(settings.uploads_dir) == []


def test_a_key_belongs_to_its_project_and_route(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    data = model_bytes(small_cnn())
    mine = client.post("/v1/models", files={"file": ("cnn.onnx", data)}, headers=_keyed("k"))
    _, other_key = new_key(db_session, settings)
    theirs = client.post("/v1/models", files={"file": ("cnn.onnx", data)},
                         headers={**_keyed("k"), **bearer(other_key)})
    dataset = client.post("/v1/datasets", files={"file": ("d.npz", npz_bytes())},
                          headers=_keyed("k"))

    assert theirs.status_code == 201 and "idempotent-replayed" not in theirs.headers
    assert theirs.json()["id"] != mine.json()["id"]  # their own model, not a replay of mine
    assert dataset.status_code == 201 and "idempotent-replayed" not in dataset.headers
    assert _count(db_session, Model) == 2
    assert _count(db_session, IdempotencyKey) == 3


def test_a_request_that_failed_releases_its_key_and_a_retry_runs_again(
        client: TestClient, db_session: Session, broker: redis.Redis, model_id: str) -> None:
    body = {**JOB_BODY, "model_id": model_id}
    client.app.dependency_overrides[get_dispatcher] = (  # type: ignore[attr-defined]
        lambda: JobDispatcher("redis://127.0.0.1:9/0"))  # nothing listens there
    refused = client.post("/v1/jobs", json=body, headers=_keyed("k"))
    assert refused.status_code == 503 and refused.json()["error"] == "BrokerUnavailable"
    assert _count(db_session, IdempotencyKey) == 0  # not stored: a retry must run again

    del client.app.dependency_overrides[get_dispatcher]  # type: ignore[attr-defined]
    retried = client.post("/v1/jobs", json=body, headers=_keyed("k"))
    assert retried.status_code == 202 and "idempotent-replayed" not in retried.headers
    assert retried.json()["status"] == "queued" and broker.llen("cpu") == 1
    assert _count(db_session, Job) == 2  # the refused one, marked failed, and the retry's
    assert client.post("/v1/jobs", json=body, headers=_keyed("k")).json() == retried.json()


def test_a_4xx_is_not_stored_either(client: TestClient, db_session: Session) -> None:
    body = {**JOB_BODY, "model_id": str(uuid.uuid4())}
    for _ in range(2):
        response = client.post("/v1/jobs", json=body, headers=_keyed("k"))
        assert response.status_code == 404 and "idempotent-replayed" not in response.headers
    assert _count(db_session, IdempotencyKey) == 0


def test_the_openapi_document_declares_the_header_the_replay_and_the_409(
        client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, success in (("/v1/models", "201"), ("/v1/datasets", "201"), ("/v1/jobs", "202")):
        operation = paths[path]["post"]
        [header] = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
        assert header["in"] == "header" and not header.get("required", False)
        assert header["schema"]["maxLength"] == 255
        responses = operation["responses"]
        assert "Idempotent-Replayed" in responses[success]["headers"]
        assert responses["409"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"}
        assert "IdempotencyKeyInProgress" in responses["409"]["description"]
