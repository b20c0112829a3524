"""A key sees its own project only: another project's model, dataset, job, artifact or event
answers 404 with the same message as an id that does not exist (never 403: that would say it
exists), and listings show the key's own rows. Workers serve every project: any key sees them."""

import re
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.models import Artifact, Job, JobStatus
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.npz_files import npz_bytes

CNN = model_bytes(small_cnn())
DATA = npz_bytes(input=np.zeros((2, 1, 3, 32, 32), np.float32))


@dataclass
class Owned:
    """What project A (the `client` fixture's) holds."""

    model: str
    dataset: str
    job: str
    upload: str


@pytest.fixture
def owned(client: TestClient, db_session: Session, settings: Settings) -> Owned:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", CNN)}).json()["id"]
    dataset = client.post("/v1/datasets", files={"file": ("d.npz", DATA)}).json()["id"]
    job = client.post("/v1/jobs", json={"model_id": model, "dataset_id": dataset})
    assert job.status_code == 202, job.text
    stored = settings.artifacts_dir / "jobs" / "x" / "engine.onnx"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"engine")
    db_session.add(Artifact(job_id=uuid.UUID(job.json()["id"]), name="engine.onnx", kind="model",
                            uri="store://jobs/x/engine.onnx", sha256="0" * 64, size_bytes=6))
    db_session.commit()
    upload = client.post("/v1/uploads", headers={"Tus-Resumable": "1.0.0", "Upload-Length": "10"})
    return Owned(model=model, dataset=dataset, job=job.json()["id"],
                 upload=upload.headers["Location"].rsplit("/", 1)[1])


@pytest.fixture
def other(client: TestClient, db_session: Session, settings: Settings) -> dict[str, str]:
    """The headers of a key of project B, which `client` (project A) sends unless told."""
    return bearer(new_key(db_session, settings)[1])


# Every /v1 route that takes an id; test_every_id_route_is_covered keeps this list whole.
ID_ROUTES = [
    ("GET", "/v1/models/{model_id}", "model"),
    ("GET", "/v1/models/{model_id}/benchmarks", "model"),
    ("GET", "/v1/datasets/{dataset_id}", "dataset"),
    ("GET", "/v1/jobs/{job_id}", "job"),
    ("POST", "/v1/jobs/{job_id}/cancel", "job"),
    ("GET", "/v1/jobs/{job_id}/artifacts/{name}", "job"),
    ("GET", "/v1/jobs/{job_id}/artifacts.tar", "job"),
    ("GET", "/v1/jobs/{job_id}/events", "job"),
    ("DELETE", "/v1/models/{model_id}", "model"),
    ("DELETE", "/v1/datasets/{dataset_id}", "dataset"),
    ("DELETE", "/v1/jobs/{job_id}", "job"),
    ("HEAD", "/v1/uploads/{upload_id}", "upload"),
    ("PATCH", "/v1/uploads/{upload_id}", "upload"),
    ("DELETE", "/v1/uploads/{upload_id}", "upload"),
]


@pytest.fixture(autouse=True)
def short_event_streams(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # A queued job's own event stream would stay open for half an hour.
    monkeypatch.setattr(settings.http, "events_max_s", 0.3)
    monkeypatch.setattr(settings.http, "events_poll_s", 0.05)


def test_every_id_route_is_covered(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    routes = {(method.upper(), path) for path, operations in paths.items() if "{" in path
              for method in operations}
    assert routes == {(method, path) for method, path, _ in ID_ROUTES}


def _path(template: str, value: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "engine.onnx" if m[1] == "name" else value, template)


@pytest.mark.parametrize(("method", "template", "kind"), ID_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in ID_ROUTES])
def test_another_projects_id_is_404_like_a_missing_one(
        client: TestClient, owned: Owned, other: dict[str, str], method: str, template: str,
        kind: str) -> None:
    theirs = getattr(owned, kind)
    missing = str(uuid.uuid4())

    foreign = client.request(method, _path(template, theirs), headers=other)
    unknown = client.request(method, _path(template, missing), headers=other)

    assert foreign.status_code == unknown.status_code == 404, foreign.text
    if method != "HEAD":  # a HEAD answer has no body to compare
        assert foreign.json() == {**unknown.json(),
                                  "detail": unknown.json()["detail"].replace(missing, theirs)}
    assert client.request(method, _path(template, theirs)).status_code != 404  # A's own


def test_another_projects_job_is_not_cancelled(client: TestClient, owned: Owned,
                                               other: dict[str, str]) -> None:
    assert client.post(f"/v1/jobs/{owned.job}/cancel", headers=other).status_code == 404
    assert client.get(f"/v1/jobs/{owned.job}").json()["status"] == "queued"


def test_another_projects_rows_are_not_deleted(client: TestClient, db_session: Session,
                                               owned: Owned, other: dict[str, str]) -> None:
    job = db_session.get_one(Job, uuid.UUID(owned.job))
    job.status = JobStatus.SUCCEEDED.value  # deletable by its own project
    db_session.commit()
    for route in (f"/v1/jobs/{owned.job}", f"/v1/models/{owned.model}",
                  f"/v1/datasets/{owned.dataset}"):
        assert client.delete(route, headers=other).status_code == 404
        assert client.get(route).status_code == 200


def test_a_job_cannot_name_another_projects_model_or_dataset(
        client: TestClient, owned: Owned, other: dict[str, str]) -> None:
    theirs = client.post("/v1/jobs", json={"model_id": owned.model}, headers=other)
    assert theirs.status_code == 404 and theirs.json()["error"] == "ModelNotFound"

    mine = client.post("/v1/models", files={"file": ("cnn.onnx", CNN)}, headers=other).json()
    response = client.post("/v1/jobs", json={"model_id": mine["id"], "dataset_id": owned.dataset},
                           headers=other)
    assert response.status_code == 404 and response.json()["error"] == "DatasetNotFound"


@pytest.mark.parametrize("listing", ["/v1/models", "/v1/datasets", "/v1/jobs"])
def test_listings_show_only_the_keys_own_rows(client: TestClient, owned: Owned,
                                              other: dict[str, str], listing: str) -> None:
    assert client.get(listing).json()["total"] == 1
    assert client.get(listing, headers=other).json() == {
        "items": [], "total": 0, "limit": 50, "offset": 0}


def test_the_job_list_filtered_by_another_projects_model_is_empty(
        client: TestClient, owned: Owned, other: dict[str, str]) -> None:
    assert client.get("/v1/jobs", params={"model_id": owned.model}).json()["total"] == 1
    assert client.get("/v1/jobs", params={"model_id": owned.model},
                      headers=other).json()["total"] == 0


def test_the_same_bytes_uploaded_by_another_project_are_its_own_new_row(
        client: TestClient, owned: Owned, other: dict[str, str]) -> None:
    for route, upload, theirs in (("/v1/models", ("cnn.onnx", CNN), owned.model),
                                  ("/v1/datasets", ("d.npz", DATA), owned.dataset)):
        response = client.post(route, files={"file": upload}, headers=other)
        assert response.status_code == 201, response.text  # not 200 "seen before"
        assert response.json()["id"] != theirs


def test_a_finished_jobs_cached_document_is_not_served_to_another_project(
        client: TestClient, db_session: Session, owned: Owned, other: dict[str, str]) -> None:
    job = db_session.get_one(Job, uuid.UUID(owned.job))
    job.status = JobStatus.SUCCEEDED.value  # ended: its document is cached for good
    db_session.commit()
    assert client.get(f"/v1/jobs/{owned.job}").status_code == 200  # now in the cache

    assert client.get(f"/v1/jobs/{owned.job}", headers=other).status_code == 404


def test_events_of_a_job_are_shown_to_its_own_project_only(
        client: TestClient, owned: Owned, other: dict[str, str]) -> None:
    assert client.get(f"/v1/jobs/{owned.job}").json()["events"]  # the "queued" event
    response = client.get(f"/v1/jobs/{owned.job}", headers=other)
    assert response.status_code == 404 and "events" not in response.json()


@pytest.mark.parametrize("route", ["/v1/workers", "/v1/passes", "/v1/plugins"])
def test_project_free_routes_answer_any_valid_key_alike(
        client: TestClient, other: dict[str, str], route: str) -> None:
    mine, theirs = client.get(route), client.get(route, headers=other)
    assert mine.status_code == theirs.status_code == 200
    assert mine.json() == theirs.json()
