"""/healthz reports what is reachable."""

import shutil
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.deps import get_dispatcher, get_store
from core.dispatch import JobDispatcher
from core.object_store import S3ArtifactStore
from core.settings import S3StoreSettings, Settings


def test_healthz_is_ok_with_database_and_broker_up(client: TestClient, settings: Settings) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    disk = body.pop("disk")
    assert body.pop("storage") == {"ok": True, "error": None,
                                   "store": f"artifact folder {settings.artifacts_dir.resolve()}"}
    assert body == {
        "status": "ok",
        "database": {"ok": True, "error": None},
        "broker": {"ok": True, "error": None},
    }
    assert disk["ok"] is True and disk["error"] is None
    assert disk["free_bytes"] >= disk["min_free_bytes"] == settings.min_free_disk_bytes
    # The data dir does not exist yet, so the space is measured on its nearest parent.
    assert Path(settings.data_dir).resolve().is_relative_to(disk["path"])


def test_healthz_is_503_when_the_data_disk_is_below_its_minimum(
    client: TestClient, settings: Settings
) -> None:
    free = shutil.disk_usage(Path(settings.data_dir).parent).free
    settings.min_free_disk_bytes = free * 2  # a minimum this disk cannot meet
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"]["ok"] is True
    assert body["disk"]["ok"] is False
    assert "FUSEFORGE_MIN_FREE_DISK_BYTES" in body["disk"]["error"]
    assert body["disk"]["free_bytes"] < body["disk"]["min_free_bytes"]


def test_healthz_is_503_naming_an_unreachable_broker(client: TestClient) -> None:
    # A real dispatcher pointed at a port where nothing listens.
    client.app.dependency_overrides[get_dispatcher] = lambda: JobDispatcher("redis://127.0.0.1:9/0")  # type: ignore[attr-defined]
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"]["ok"] is True
    assert body["broker"]["ok"] is False and body["broker"]["error"]


def test_healthz_is_503_naming_an_artifact_store_that_does_not_answer(
        client: TestClient, tmp_path: Path) -> None:
    # A real S3 store whose endpoint is a port where nothing listens.
    dead = S3ArtifactStore.from_settings(
        S3StoreSettings(endpoint_url="http://127.0.0.1:9", bucket="artifacts",
                        access_key_id="k", secret_access_key=SecretStr("s"),
                        connect_timeout_s=1), tmp_path / "cache")
    client.app.dependency_overrides[get_store] = lambda: dead  # type: ignore[attr-defined]
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"]["ok"] is True
    assert body["storage"]["ok"] is False
    assert body["storage"]["store"] == "bucket 'artifacts' at http://127.0.0.1:9"
    assert "could not reach" in body["storage"]["error"]
