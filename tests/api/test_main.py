"""api/main.py: every error, foreseen or not, leaves as the API's JSON shape."""

import logging
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_current_project, get_session
from api.main import create_app


def _broken_session() -> Iterator[Session]:
    raise RuntimeError("the secret at postgresql://user:hunter2@db is not for clients")
    yield  # pragma: no cover - a generator dependency, as get_session is


@pytest.fixture
def broken_client() -> Iterator[TestClient]:
    """A client whose database dependency raises an exception nothing handles."""
    app = create_app()
    app.dependency_overrides[get_session] = _broken_session
    app.dependency_overrides[get_current_project] = lambda: uuid.uuid4()
    # The server would log and answer; raise_server_exceptions=False lets the test see that answer.
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_an_unhandled_exception_is_a_json_500_with_a_reference(
    broken_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="api.main"):
        response = broken_client.get("/v1/models")

    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"] == "InternalError"
    assert "GET /v1/models" in body["detail"] and "RuntimeError" in body["detail"]
    assert "hunter2" not in body["detail"]
    reference = body["detail"].split("reference ")[1].split(".")[0]
    record = next(r for r in caplog.records if reference in r.getMessage())
    assert record.exc_info is not None and "hunter2" in str(record.exc_info[1])
