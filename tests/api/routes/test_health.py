"""/healthz reports what is reachable."""

from fastapi.testclient import TestClient

from api.deps import get_dispatcher
from core.dispatch import JobDispatcher


def test_healthz_is_ok_with_database_and_broker_up(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": {"ok": True, "error": None},
        "broker": {"ok": True, "error": None},
    }


def test_healthz_is_503_naming_an_unreachable_broker(client: TestClient) -> None:
    # A real dispatcher pointed at a port where nothing listens.
    client.app.dependency_overrides[get_dispatcher] = lambda: JobDispatcher("redis://127.0.0.1:9/0")  # type: ignore[attr-defined]
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"]["ok"] is True
    assert body["broker"]["ok"] is False and body["broker"]["error"]
