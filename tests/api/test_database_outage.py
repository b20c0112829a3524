"""During a database outage every database-backed route answers JSON 503 with Retry-After, and
an upload leaves nothing behind. The outage is real: the app's sessions point at a PostgreSQL
URL on a port where nothing listens, so the driver's connection is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from api.deps import get_api_settings, get_read_sessions, get_session
from api.main import create_app
from core.db.session import make_engine
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import TEST_AUTH, bearer
from tests.support.databases import fresh_database
from tests.support.processes import free_port

SOME_ID = str(uuid.uuid4())
ROUTES = [
    ("GET", "/v1/models", {}),
    ("GET", f"/v1/models/{SOME_ID}", {}),
    ("POST", "/v1/models", {"files": {"file": ("cnn.onnx", model_bytes(small_cnn()))}}),
    ("GET", "/v1/datasets", {}),
    ("GET", f"/v1/datasets/{SOME_ID}", {}),
    ("POST", "/v1/datasets", {"files": {"file": ("d.npz", b"PK\x05\x06" + b"\0" * 18)}}),
    ("GET", "/v1/jobs", {}),
    ("GET", f"/v1/jobs/{SOME_ID}", {}),
    ("POST", "/v1/jobs", {"json": {"model_id": SOME_ID}}),
    ("POST", f"/v1/jobs/{SOME_ID}/cancel", {}),
    ("GET", f"/v1/jobs/{SOME_ID}/events", {}),
    ("GET", f"/v1/jobs/{SOME_ID}/artifacts/engine.onnx", {}),
    ("GET", "/v1/workers", {}),
]


@pytest.fixture(scope="module")
def dead_database() -> Iterator[Engine]:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/fuseforge")
    yield engine
    engine.dispose()


@pytest.fixture
def outage_client(dead_database: Engine, settings: Settings) -> Iterator[TestClient]:
    def dead_session() -> Iterator[Session]:
        with Session(dead_database) as session:
            yield session

    app = create_app()
    app.dependency_overrides[get_session] = dead_session
    app.dependency_overrides[get_read_sessions] = lambda: lambda: Session(dead_database)
    app.dependency_overrides[get_api_settings] = lambda: settings
    # The key is checked against the database too, so it meets the outage first.
    with TestClient(app, raise_server_exceptions=False, headers=bearer("ff_" + "k" * 43)) as client:
        yield client


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES,
                         ids=[f"{m} {p.replace(SOME_ID, '{id}')}" for m, p, _ in ROUTES])
def test_every_database_route_is_503_with_retry_after(
    outage_client: TestClient, settings: Settings, method: str, path: str, kwargs: dict
) -> None:
    response = outage_client.request(method, path, **kwargs)

    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert body["error"] == "DatabaseUnavailable"
    assert f"{method} {path} needs the database, which is unavailable" in body["detail"]
    assert [p for p in settings.data_dir.rglob("*") if p.is_file()] == []


def test_healthz_says_the_database_is_down(outage_client: TestClient) -> None:
    response = outage_client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"]["ok"] is False


def test_a_database_error_that_is_no_outage_is_a_json_500(tmp_path: Path) -> None:
    # An unmigrated PostgreSQL database: "relation does not exist" is our fault, not an outage.
    with fresh_database("postgresql", tmp_path, name="fuseforge_unmigrated",
                        migrated=False) as engine:
        def unmigrated_session() -> Iterator[Session]:
            with Session(engine) as session:
                yield session

        app = create_app()
        app.dependency_overrides[get_session] = unmigrated_session
        app.dependency_overrides[get_read_sessions] = lambda: lambda: Session(engine)
        app.dependency_overrides[get_api_settings] = lambda: Settings(
            env="test", data_dir=tmp_path / "data", auth=TEST_AUTH)
        with TestClient(app, raise_server_exceptions=False,
                        headers=bearer("ff_" + "k" * 43)) as client:
            response = client.get("/v1/models")

    assert response.status_code == 500, response.text
    assert response.json()["error"] == "InternalError"
    assert "retry-after" not in response.headers
