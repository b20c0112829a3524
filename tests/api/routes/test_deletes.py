"""Deleting models, jobs and datasets: refused (409, naming what is in the way, nothing deleted)
while a job is queued or running; otherwise every row and file of it goes, and its id is 404."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.deps import get_store
from core.db.calibrations import record_calibration
from core.db.models import (
    Artifact,
    BenchmarkRecord,
    Calibration,
    Dataset,
    Job,
    JobEvent,
    JobStatus,
    Model,
    ValidationResult,
    WebhookDelivery,
)
from core.db.types import utc_now
from core.settings import Settings
from core.storage import LocalArtifactStore
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.npz_files import npz_bytes

CNN = model_bytes(small_cnn(seed=3))
DATA = npz_bytes(input=np.zeros((2, 1, 3, 32, 32), np.float32))
_JOB_RECORDS = (Artifact, ValidationResult, BenchmarkRecord, JobEvent, WebhookDelivery)


def _upload(client: TestClient, route: str = "/v1/models", data: bytes = CNN,
            name: str = "cnn.onnx", **headers: str) -> dict[str, Any]:
    response = client.post(route, files={"file": (name, data)}, headers=headers)
    assert response.status_code in (200, 201), response.text
    return response.json()  # type: ignore[no-any-return]


def _submit(client: TestClient, model_id: str, **config: Any) -> str:
    response = client.post("/v1/jobs", json={"model_id": model_id, **config})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _finish(db_session: Session, settings: Settings, job_id: str,
            status: JobStatus = JobStatus.SUCCEEDED) -> Path:
    """End the job as a worker would, with a record of every kind and a stored artifact file;
    the folder its files are in."""
    key = uuid.UUID(job_id)
    stored = LocalArtifactStore(settings.artifacts_dir)
    source = settings.data_dir / "engine.onnx"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(b"engine bytes")
    obj = stored.put_file(source, f"jobs/{job_id}/engine.onnx")
    source.unlink()
    job = db_session.get_one(Job, key)
    job.status, job.finished_at = status.value, utc_now()
    db_session.add_all([
        Artifact(job_id=key, name="engine.onnx", kind="engine", uri=obj.uri, sha256=obj.sha256,
                 size_bytes=obj.size_bytes),
        ValidationResult(job_id=key, output_name="logits", samples=2, max_abs_err=0.0,
                         max_rel_err=0.0, mean_abs_err=0.0, cosine_similarity=1.0, atol=1e-4,
                         rtol=1e-3, min_cosine=0.99, passed=True),
        BenchmarkRecord(job_id=key, variant="engine", backend="onnxruntime", batch_size=2,
                        iterations=3, warmup=1, latency_ms_p50=1.0, latency_ms_p90=1.0,
                        latency_ms_p99=1.0, latency_ms_mean=1.0, throughput_per_s=2000.0),
        WebhookDelivery(job_id=key, delivery_id=uuid.uuid4(), event="job.succeeded", attempt=1,
                        url="https://hooks.example.com/x", status_code=200, duration_ms=5.0,
                        final=True),
    ])
    db_session.commit()
    return settings.artifacts_dir / "jobs" / job_id


def _records_of(db_session: Session, job_id: str) -> dict[str, int]:
    key = uuid.UUID(job_id)
    return {table.__tablename__: db_session.scalar(
        select(func.count()).select_from(table).where(table.job_id == key)) or 0
        for table in _JOB_RECORDS}


def _count(db_session: Session, table: type[Model | Dataset | Job], row_id: str | None = None
           ) -> int:
    """Rows in `table` (with id `row_id`), read from the database, not the session's objects."""
    query = select(func.count()).select_from(table)
    if row_id is not None:
        query = query.where(table.id == uuid.UUID(row_id))
    return db_session.scalar(query) or 0


def _stored_upload(db_session: Session, settings: Settings, body: dict[str, Any],
                   kind: type[Model | Dataset] = Model) -> Path:
    """The stored file of the uploaded model (or dataset) `body` (ask before deleting it)."""
    uri = db_session.scalar(select(kind.storage_uri).where(kind.id == uuid.UUID(body["id"])))
    assert uri is not None
    return LocalArtifactStore(settings.artifacts_dir).local_path(uri)


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING])
def test_deleting_a_queued_or_running_job_is_409_saying_to_cancel_it_and_deletes_nothing(
        client: TestClient, db_session: Session, status: JobStatus) -> None:
    job_id = _submit(client, _upload(client)["id"])
    db_session.get_one(Job, uuid.UUID(job_id)).status = status.value
    db_session.commit()

    response = client.delete(f"/v1/jobs/{job_id}")

    assert response.status_code == 409, response.text
    assert response.json()["error"] == "JobNotDeletable"
    assert status.value in response.json()["detail"]
    assert f"POST /v1/jobs/{job_id}/cancel" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == status.value
    assert _records_of(db_session, job_id)["job_events"] == 1  # its "queued" event


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_deleting_a_finished_job_removes_its_rows_and_files_and_it_is_404_after(
        client: TestClient, db_session: Session, settings: Settings, status: JobStatus) -> None:
    model = _upload(client)
    job_id = _submit(client, model["id"])
    kept = _submit(client, model["id"])
    folder = _finish(db_session, settings, job_id, status)
    assert client.get(f"/v1/jobs/{job_id}").status_code == 200  # an ended job: now cached
    assert all(_records_of(db_session, job_id).values())

    response = client.delete(f"/v1/jobs/{job_id}")

    assert response.status_code == 204, response.text
    assert response.content == b""
    assert not folder.exists()
    assert _count(db_session, Job, job_id) == 0
    assert not any(_records_of(db_session, job_id).values())
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/artifacts/engine.onnx"):
        assert client.get(path).status_code == 404
    assert client.delete(f"/v1/jobs/{job_id}").json()["error"] == "JobNotFound"
    assert [j["id"] for j in client.get("/v1/jobs").json()["items"]] == [kept]
    assert client.get(f"/v1/models/{model['id']}").status_code == 200  # the model stays
    assert _stored_upload(db_session, settings, model).exists()


def test_deleting_a_model_with_a_queued_job_is_409_naming_it_and_deletes_nothing(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    model = _upload(client)
    finished = _submit(client, model["id"])
    folder = _finish(db_session, settings, finished)
    queued = _submit(client, model["id"])

    response = client.delete(f"/v1/models/{model['id']}")

    assert response.status_code == 409, response.text
    assert response.json()["error"] == "ModelInUse"
    assert queued in response.json()["detail"] and finished not in response.json()["detail"]
    assert client.get(f"/v1/models/{model['id']}").status_code == 200
    assert client.get("/v1/jobs").json()["total"] == 2
    assert folder.exists() and _stored_upload(db_session, settings, model).exists()


def test_deleting_a_model_removes_its_jobs_their_records_and_every_file(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    model = _upload(client)
    other = _upload(client, data=model_bytes(small_cnn(seed=4)))
    jobs = [_submit(client, model["id"]) for _ in range(2)]
    folders = [_finish(db_session, settings, job_id) for job_id in jobs]
    other_job = _submit(client, other["id"])
    stored = _stored_upload(db_session, settings, model)

    response = client.delete(f"/v1/models/{model['id']}")

    assert response.status_code == 204, response.text
    assert client.get(f"/v1/models/{model['id']}").status_code == 404
    assert client.delete(f"/v1/models/{model['id']}").json()["error"] == "ModelNotFound"
    for job_id, folder in zip(jobs, folders, strict=True):
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
        assert not any(_records_of(db_session, job_id).values())
        assert not folder.exists()
    assert not stored.exists()
    assert [m["id"] for m in client.get("/v1/models").json()["items"]] == [other["id"]]
    assert [j["id"] for j in client.get("/v1/jobs").json()["items"]] == [other_job]
    assert _stored_upload(db_session, settings, other).exists()


def test_a_model_another_project_also_uploaded_keeps_its_file(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    mine = _upload(client)
    theirs = _upload(client, **bearer(new_key(db_session, settings)[1]))
    assert theirs["id"] != mine["id"] and theirs["sha256"] == mine["sha256"]
    my_file, their_file = (_stored_upload(db_session, settings, m) for m in (mine, theirs))

    assert client.delete(f"/v1/models/{mine['id']}").status_code == 204

    assert not my_file.exists() and their_file.exists()  # each project's upload is its own
    assert _count(db_session, Model, theirs["id"]) == 1


def test_a_file_that_cannot_be_removed_leaves_the_delete_done_and_the_file_to_the_janitor(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    class StuckStore(LocalArtifactStore):
        def delete_prefix(self, prefix: str) -> None:
            raise PermissionError(13, "Permission denied", prefix)

    job_id = _submit(client, _upload(client)["id"])
    folder = _finish(db_session, settings, job_id)
    client.app.dependency_overrides[get_store] = (  # type: ignore[attr-defined]
        lambda: StuckStore(settings.artifacts_dir))

    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204

    assert _count(db_session, Job, job_id) == 0
    assert folder.exists()  # the janitor's leftover sweep removes it: no row records it


def test_deleting_a_dataset_a_queued_job_uses_is_409_naming_the_job(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    dataset = _upload(client, "/v1/datasets", DATA, "d.npz")
    job_id = _submit(client, _upload(client)["id"], dataset_id=dataset["id"])

    response = client.delete(f"/v1/datasets/{dataset['id']}")

    assert response.status_code == 409, response.text
    assert response.json()["error"] == "DatasetInUse" and job_id in response.json()["detail"]
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 200
    assert _stored_upload(db_session, settings, dataset, Dataset).exists()


def test_deleting_a_dataset_keeps_the_finished_jobs_that_used_it(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    dataset = _upload(client, "/v1/datasets", DATA, "d.npz")
    job_id = _submit(client, _upload(client)["id"], dataset_id=dataset["id"])
    _finish(db_session, settings, job_id)
    stored = _stored_upload(db_session, settings, dataset, Dataset)

    response = client.delete(f"/v1/datasets/{dataset['id']}")

    assert response.status_code == 204, response.text
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 404
    assert not stored.exists()
    assert db_session.scalar(select(Job.dataset_id).where(Job.id == uuid.UUID(job_id))) is None
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["config"]["dataset_id"] == dataset["id"]  # which one it validated on
    assert job["validation"]["passed"] is True and job["artifacts"]
    assert _count(db_session, Dataset) == 0


def test_a_new_job_cannot_name_a_deleted_model(client: TestClient) -> None:
    model = _upload(client)
    assert client.delete(f"/v1/models/{model['id']}").status_code == 204
    response = client.post("/v1/jobs", json={"model_id": model["id"]})
    assert response.status_code == 404 and response.json()["error"] == "ModelNotFound"


def test_the_delete_routes_document_204_404_and_409(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/models/{model_id}", "/v1/datasets/{dataset_id}", "/v1/jobs/{job_id}"):
        operation = paths[path]["delete"]
        assert {"204", "404", "409"} <= set(operation["responses"]), path
        assert "queued or running" in " ".join(operation["description"].split())
    assert "410" in paths["/v1/jobs/{job_id}/artifacts/{name}"]["get"]["responses"]


def _stored_calibration(db_session: Session, settings: Settings, model: dict[str, Any],
                        dataset: dict[str, Any], method: str = "minmax") -> Path:
    """A calibration of the model on the dataset as a worker records it: its file, its row."""
    source = settings.data_dir / "ranges.json"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(b'{"input": [-1.0, 1.0]}')
    obj = LocalArtifactStore(settings.artifacts_dir).put_file(
        source, f"calibrations/{model['id']}/{dataset['id']}-{method}.json")
    source.unlink()
    project_id = db_session.get_one(Model, uuid.UUID(model["id"])).project_id
    record_calibration(db_session, project_id=project_id,
                       model_id=uuid.UUID(model["id"]), dataset_id=uuid.UUID(dataset["id"]),
                       method=method, graph_sha256="g" * 64, storage_uri=obj.uri,
                       sha256=obj.sha256, size_bytes=obj.size_bytes, samples=2)
    db_session.commit()
    return settings.artifacts_dir / "calibrations" / model["id"] / f"{dataset['id']}-{method}.json"


def _calibrations(db_session: Session) -> int:
    return db_session.scalar(select(func.count()).select_from(Calibration)) or 0


def test_deleting_a_dataset_removes_its_calibrations_and_their_files(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    model = _upload(client)
    dataset = _upload(client, "/v1/datasets?role=calibration", DATA, "c.npz")
    path = _stored_calibration(db_session, settings, model, dataset)
    assert path.exists()

    response = client.delete(f"/v1/datasets/{dataset['id']}")

    assert response.status_code == 204, response.text
    assert not path.exists()
    assert _calibrations(db_session) == 0


def test_deleting_a_model_removes_its_calibrations_and_their_files(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    model = _upload(client)
    dataset = _upload(client, "/v1/datasets?role=calibration", DATA, "c.npz")
    paths = [_stored_calibration(db_session, settings, model, dataset, method)
             for method in ("minmax", "entropy")]

    response = client.delete(f"/v1/models/{model['id']}")

    assert response.status_code == 204, response.text
    assert not any(path.exists() for path in paths)
    assert _calibrations(db_session) == 0
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 200


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING])
def test_deleting_a_dataset_a_queued_job_calibrates_on_is_409_naming_the_job(
        client: TestClient, db_session: Session, settings: Settings, status: JobStatus) -> None:
    dataset = _upload(client, "/v1/datasets?role=calibration", DATA, "c.npz")
    job_id = _submit(client, _upload(client)["id"])
    # The job config's quantization block is not in JobConfig yet: stored as a worker reads it.
    job = db_session.get_one(Job, uuid.UUID(job_id))
    job.config = {**job.config, "quantization": {"calibration": dataset["id"]}}
    job.status = status.value
    db_session.commit()

    response = client.delete(f"/v1/datasets/{dataset['id']}")

    assert response.status_code == 409, response.text
    assert response.json()["error"] == "DatasetInUse" and job_id in response.json()["detail"]
    assert _stored_upload(db_session, settings, dataset, Dataset).exists()
