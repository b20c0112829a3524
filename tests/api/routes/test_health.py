"""/healthz reports what is reachable."""

import shutil
from pathlib import Path

from fastapi.testclient import TestClient

from api.deps import get_dispatcher
from core.dispatch import JobDispatcher
from core.settings import Settings


def test_healthz_is_ok_with_database_and_broker_up(client: TestClient, settings: Settings) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    disk = body.pop("disk")
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
