"""API keys on the API: every /v1 route wants one; no key, a malformed, unknown, revoked or
expired one all get the same 401; /healthz needs none; with auth off (dev only) requests act as
the default project; a key is stored as an HMAC and shows up in no log, error or job."""

import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import UNAUTHORIZED, get_api_settings, get_read_sessions, get_session
from api.main import create_app
from core.api_keys import revoke_key
from core.db.models import DEFAULT_PROJECT_ID, ApiKey, Job, Model
from core.settings import AuthSettings, Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key

SOME_ID = "00000000-0000-0000-0000-000000000000"
CNN = model_bytes(small_cnn())


def _assert_unauthorized(response: object) -> None:
    assert response.status_code == 401, response.text  # type: ignore[attr-defined]
    if response.request.method != "HEAD":  # type: ignore[attr-defined]  # (HEAD has no body)
        assert response.json() == {"error": "Unauthorized", "detail": UNAUTHORIZED}  # type: ignore[attr-defined]
    assert response.headers["www-authenticate"] == "Bearer"  # type: ignore[attr-defined]


def _v1_routes(client: TestClient) -> list[tuple[str, str]]:
    """(method, path) of every /v1 route the API documents, path parameters filled in."""
    paths = client.get("/openapi.json").json()["paths"]
    return [(method.upper(), re.sub(r"\{(\w+)\}",
                                    lambda m: "engine.onnx" if m[1] == "name" else SOME_ID, path))
            for path, operations in paths.items() if path.startswith("/v1")
            for method in operations]


def test_every_v1_route_without_a_key_is_401_before_anything_else(
        anonymous_client: TestClient, db_session: Session) -> None:
    routes = _v1_routes(anonymous_client)
    assert len(routes) >= 12  # models, datasets, jobs, artifacts, workers, passes, plugins

    for method, path in routes:
        body = {"files": {"file": ("cnn.onnx", CNN)}} if path in ("/v1/models",) else {}
        _assert_unauthorized(anonymous_client.request(method, path, **body))
    assert db_session.scalar(select(Model.id)) is None  # the upload was refused, not stored


@pytest.mark.parametrize("header", [
    "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token ff_abc", "ff_abc",
    "Bearer not-a-key", "Bearer ff_" + "x" * 43, "Bearer ff_" + "x" * 5000,
], ids=["empty", "scheme-only", "scheme-blank", "basic", "token", "no-scheme", "not-ours",
        "unknown", "huge"])
def test_a_malformed_or_unknown_key_gets_the_same_401(anonymous_client: TestClient,
                                                       header: str) -> None:
    _assert_unauthorized(anonymous_client.get("/v1/models", headers={"Authorization": header}))


def test_a_key_works_with_any_case_of_bearer(anonymous_client: TestClient,
                                              api_key: tuple[uuid.UUID, str]) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = anonymous_client.get("/v1/models",
                                        headers={"Authorization": f"{scheme} {api_key[1]}"})
        assert response.status_code == 200, response.text


def test_revoked_key_gets_401(anonymous_client: TestClient, db_session: Session,
                              settings: Settings) -> None:
    _, key = new_key(db_session, settings)
    assert anonymous_client.get("/v1/models", headers=bearer(key)).status_code == 200
    [row] = db_session.scalars(select(ApiKey).where(ApiKey.prefix == key[:11])).all()

    revoke_key(session=db_session, key_id=row.id)
    db_session.commit()

    _assert_unauthorized(anonymous_client.get("/v1/models", headers=bearer(key)))


def test_expired_key_gets_401_and_an_unexpired_one_works(
        anonymous_client: TestClient, db_session: Session, settings: Settings) -> None:
    _, expired = new_key(db_session, settings, expires_in=timedelta(seconds=-1))
    _, fresh = new_key(db_session, settings, expires_in=timedelta(days=1))

    _assert_unauthorized(anonymous_client.get("/v1/models", headers=bearer(expired)))
    assert anonymous_client.get("/v1/models", headers=bearer(fresh)).status_code == 200


def test_a_key_made_with_another_secret_gets_401(
        anonymous_client: TestClient, db_session: Session, settings: Settings) -> None:
    other = settings.model_copy(update={"auth": AuthSettings(secret="another-" + "s" * 40)})
    _, key = new_key(db_session, other)
    _assert_unauthorized(anonymous_client.get("/v1/models", headers=bearer(key)))


def test_healthz_needs_no_key(anonymous_client: TestClient) -> None:
    assert anonymous_client.get("/healthz").status_code in (200, 503)  # answered, not 401


def test_key_is_stored_as_an_hmac_only(db_session: Session, api_key: tuple[uuid.UUID, str]
                                       ) -> None:
    [row] = db_session.scalars(select(ApiKey).where(ApiKey.project_id == api_key[0])).all()
    stored = " ".join(str(v) for v in (row.name, row.prefix, row.key_hash))
    assert api_key[1] not in stored
    assert api_key[1][:11] == row.prefix and len(row.key_hash) == 64


def test_keys_appear_in_no_log_error_or_job(
        client: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str],
        caplog: pytest.LogCaptureFixture) -> None:
    bad_key = "ff_" + "q" * 43
    with caplog.at_level(logging.DEBUG):
        model = client.post("/v1/models", files={"file": ("cnn.onnx", CNN)}).json()
        job = client.post("/v1/jobs", json={"model_id": model["id"]})
        refused = client.get("/v1/models", headers=bearer(bad_key))
        missing = client.get(f"/v1/jobs/{SOME_ID}")

    assert job.status_code == 202, job.text
    texts = [caplog.text, refused.text, missing.text, job.text]
    row = db_session.get_one(Job, uuid.UUID(job.json()["id"]))
    texts += [str(row.config), str(row.status_detail), str(row.error_message)]
    for text in texts:
        assert api_key[1] not in text and bad_key not in text


@pytest.fixture
def keyless_client(anonymous_client: TestClient, settings: Settings) -> Iterator[TestClient]:
    """The API with FUSEFORGE_AUTH__ENABLED=false."""
    settings.auth = AuthSettings(enabled=False)
    yield anonymous_client


def test_with_auth_off_requests_act_as_the_default_project(
        keyless_client: TestClient, db_session: Session) -> None:
    response = keyless_client.post("/v1/models", files={"file": ("cnn.onnx", CNN)})

    assert response.status_code == 201, response.text
    model = db_session.get_one(Model, uuid.UUID(response.json()["id"]))
    assert model.project_id == DEFAULT_PROJECT_ID


def test_openapi_documents_the_bearer_scheme_on_v1_routes_only(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert spec["paths"]["/v1/models"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]


@contextmanager
def _caching_client(db_session: Session, settings: Settings,
                    key_cache_s: float) -> Iterator[TestClient]:
    """The API trusting a key it checked for `key_cache_s` (FUSEFORGE_AUTH__KEY_CACHE_S)."""
    settings.auth = settings.auth.model_copy(update={"key_cache_s": key_cache_s})
    app = create_app(settings)
    app.dependency_overrides[get_session] = lambda: db_session
    app.dependency_overrides[get_read_sessions] = lambda: lambda: nullcontext(db_session)
    app.dependency_overrides[get_api_settings] = lambda: settings
    with TestClient(app) as test_client:
        yield test_client


def test_a_revoked_key_stops_working_within_key_cache_s(
        db_session: Session, settings: Settings) -> None:
    _, key = new_key(db_session, settings)
    with _caching_client(db_session, settings, key_cache_s=0.5) as client:
        assert client.get("/v1/models", headers=bearer(key)).status_code == 200
        [row] = db_session.scalars(select(ApiKey).where(ApiKey.prefix == key[:11])).all()
        revoke_key(session=db_session, key_id=row.id)
        db_session.commit()

        assert client.get("/v1/models", headers=bearer(key)).status_code == 200  # trusted
        time.sleep(0.6)
        _assert_unauthorized(client.get("/v1/models", headers=bearer(key)))


def test_a_trusted_key_stops_working_at_its_expiry(db_session: Session,
                                                    settings: Settings) -> None:
    _, key = new_key(db_session, settings, expires_in=timedelta(seconds=0.5))
    with _caching_client(db_session, settings, key_cache_s=60) as client:
        assert client.get("/v1/models", headers=bearer(key)).status_code == 200
        time.sleep(0.6)
        _assert_unauthorized(client.get("/v1/models", headers=bearer(key)))
