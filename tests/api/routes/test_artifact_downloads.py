"""Artifact downloads by store: a presigned redirect from S3 (a real SeaweedFS), the object
streamed through the API when presigned downloads are off, and the file itself from a folder."""

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_store
from core.db.models import Artifact, Job
from core.object_store import S3ArtifactStore
from core.settings import Settings
from core.storage import ArtifactStore, LocalArtifactStore
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.object_store import SeaweedS3, seaweed_s3

PLOT = b'<svg xmlns="http://www.w3.org/2000/svg"><text>latency</text></svg>' * 40_000  # 2.7 MB


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with seaweed_s3() as server:
        server.create_bucket("downloads")
        yield server


def _job_with_plot(client: TestClient, db_session: Session, store: ArtifactStore,
                   tmp_path: Path) -> str:
    """A succeeded job whose plot.svg is stored in `store`."""
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    job_id = client.post("/v1/jobs", json={"model_id": model.json()["id"]}).json()["id"]
    source = tmp_path / "plot.svg"
    source.write_bytes(PLOT)
    stored = store.put_file(source, f"jobs/{job_id}/plot.svg")
    db_session.get_one(Job, uuid.UUID(job_id)).status = "succeeded"
    db_session.add(Artifact(job_id=uuid.UUID(job_id), name="plot.svg", kind="plot",
                            uri=stored.uri, sha256=stored.sha256, size_bytes=stored.size_bytes))
    db_session.commit()
    return str(job_id)


def _plot_download(client: TestClient, db_session: Session, seaweed: SeaweedS3,
                   tmp_path: Path, *, presigned: bool) -> httpx.Response:
    """GET of a stored plot through an API whose store is a bucket of SeaweedFS's."""
    settings = seaweed.settings("downloads", prefix=f"{uuid.uuid4().hex[:8]}/").model_copy(
        update={"presigned_downloads": presigned})
    store = S3ArtifactStore.from_settings(settings, tmp_path / "cache")
    client.app.dependency_overrides[get_store] = lambda: store  # type: ignore[attr-defined]
    job_id = _job_with_plot(client, db_session, store, tmp_path)
    answer: httpx.Response = client.get(f"/v1/jobs/{job_id}/artifacts/plot.svg",
                                        follow_redirects=False)
    return answer


def test_with_presigned_downloads_off_the_api_streams_the_object(
        client: TestClient, db_session: Session, seaweed: SeaweedS3, tmp_path: Path) -> None:
    answer = _plot_download(client, db_session, seaweed, tmp_path, presigned=False)

    assert answer.status_code == 200 and answer.content == PLOT
    assert answer.headers["content-length"] == str(len(PLOT))
    assert answer.headers["content-disposition"] == 'attachment; filename="plot.svg"'
    assert answer.headers["content-type"].startswith("image/svg+xml")
    assert answer.headers["x-content-sha256"] == hashlib.sha256(PLOT).hexdigest()
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert not (tmp_path / "cache").exists()  # streamed: no copy on the API's disk


def test_with_presigned_downloads_on_the_api_redirects_to_the_store(
        client: TestClient, db_session: Session, seaweed: SeaweedS3, tmp_path: Path) -> None:
    answer = _plot_download(client, db_session, seaweed, tmp_path, presigned=True)

    assert answer.status_code == 307 and answer.content == b""
    assert answer.headers["location"].startswith(f"{seaweed.endpoint_url}/downloads/")
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["x-content-sha256"] == hashlib.sha256(PLOT).hexdigest()


def test_from_a_folder_the_api_sends_the_file(client: TestClient, db_session: Session,
                                             settings: Settings, tmp_path: Path) -> None:
    store = LocalArtifactStore(settings.artifacts_dir)  # the store the settings configure
    job_id = _job_with_plot(client, db_session, store, tmp_path)
    answer = client.get(f"/v1/jobs/{job_id}/artifacts/plot.svg", headers={"Range": "bytes=0-9"})

    assert answer.status_code == 206 and answer.content == PLOT[:10]
