"""/healthz reports what is reachable."""

import pytest
from celery import Celery
from fastapi.testclient import TestClient

from api.services import health


def test_healthz_is_ok_with_database_and_broker_up(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": {"ok": True, "error": None},
        "broker": {"ok": True, "error": None},
    }


def test_healthz_is_503_naming_an_unreachable_broker(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real Celery app pointed at a port where nothing listens.
    monkeypatch.setattr(health, "celery_app", Celery(broker="redis://127.0.0.1:9/0"))
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"]["ok"] is True
    assert body["broker"]["ok"] is False and body["broker"]["error"]
