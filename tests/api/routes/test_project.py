"""/v1/project: a key reads and changes its own project only; the default webhook is checked
like a job's callback URL when it is set (422, nothing stored) and goes into the config of the
project's jobs submitted without a `callback_url` field (a job's own URL, or an explicit null,
wins)."""

import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_api_settings
from core.db.models import Job, Project
from core.settings import Settings, WebhookSettings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key

HOOK = "http://127.0.0.1:9/hooks/project"
PUBLIC_HOOK = "https://93.184.215.14/hooks/fuseforge"  # a literal public address: no DNS needed


@pytest.fixture
def loopback_allowed(client: TestClient, settings: Settings) -> Settings:
    # The client's own settings (its API key's secret among them), callbacks to 127/8 allowed.
    allowed = settings.model_copy(update={
        "webhooks": WebhookSettings(allowed_networks=["127.0.0.0/8"])})
    client.app.dependency_overrides[get_api_settings] = lambda: allowed  # type: ignore[attr-defined]
    return allowed


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _stored_default(db_session: Session, project_id: uuid.UUID) -> str | None:
    project = db_session.get_one(Project, project_id)
    db_session.refresh(project)
    return project.default_callback_url


def test_get_answers_the_keys_own_project(client: TestClient, db_session: Session,
                                          api_key: tuple[uuid.UUID, str]) -> None:
    body = client.get("/v1/project").json()

    project = db_session.get_one(Project, api_key[0])
    assert body["id"] == str(project.id) and body["name"] == project.name
    assert body["default_callback_url"] is None


def test_patch_sets_and_null_clears_the_default_webhook_and_an_empty_body_keeps_it(
        client: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str],
        loopback_allowed: Settings) -> None:
    response = client.patch("/v1/project", json={"default_callback_url": HOOK})

    assert response.status_code == 200, response.text
    assert response.json()["default_callback_url"] == HOOK
    assert client.get("/v1/project").json()["default_callback_url"] == HOOK
    assert _stored_default(db_session, api_key[0]) == HOOK

    assert client.patch("/v1/project", json={}).json()["default_callback_url"] == HOOK
    cleared = client.patch("/v1/project", json={"default_callback_url": None})
    assert cleared.status_code == 200 and cleared.json()["default_callback_url"] is None
    assert _stored_default(db_session, api_key[0]) is None


def test_patch_changes_only_the_keys_own_project(
        client: TestClient, db_session: Session, settings: Settings,
        api_key: tuple[uuid.UUID, str]) -> None:
    other_id, other_key = new_key(db_session, settings)

    response = client.patch("/v1/project", json={"default_callback_url": PUBLIC_HOOK},
                            headers=bearer(other_key))

    assert response.status_code == 200, response.text
    assert response.json()["id"] == str(other_id)
    assert _stored_default(db_session, other_id) == PUBLIC_HOOK
    assert _stored_default(db_session, api_key[0]) is None
    assert client.get("/v1/project").json()["default_callback_url"] is None


@pytest.mark.parametrize(("url", "kind"), [
    ("http://127.0.0.1:8080/hook", "a loopback address"),
    ("http://localhost/hook", "a loopback address"),
    ("http://10.0.0.5/hook", "a private address"),
    ("http://169.254.169.254/latest/meta-data", "a link-local address"),
    ("http://[::ffff:127.0.0.1]/hook", "a loopback address"),
])
def test_a_default_webhook_to_a_non_public_address_is_422_and_nothing_is_stored(
        client: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str], url: str,
        kind: str) -> None:
    client.patch("/v1/project", json={"default_callback_url": PUBLIC_HOOK})

    response = client.patch("/v1/project", json={"default_callback_url": url})

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidProjectSettings"
    assert body["detail"].startswith("default_callback_url: host ") and kind in body["detail"]
    assert "FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS" in body["detail"]
    assert _stored_default(db_session, api_key[0]) == PUBLIC_HOOK


@pytest.mark.parametrize(("body", "problem"), [
    ({"default_callback_url": "ftp://example.com/hook"},
     "default_callback_url: the scheme must be http or https, not 'ftp'"),
    ({"default_callback_url": "https://user:pw@example.com/hook"},
     "default_callback_url: must not carry credentials"),
    ({"default_callback_url": "https://hooks.example.com/a#b"},
     "default_callback_url: must not have a #fragment"),
    ({"name": "renamed"}, "name: Extra inputs are not permitted"),
])
def test_a_malformed_patch_is_422_naming_the_field(
        client: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str],
        body: dict[str, str], problem: str) -> None:
    response = client.patch("/v1/project", json=body)

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "ValidationError"
    assert response.json()["detail"].startswith(problem)
    assert _stored_default(db_session, api_key[0]) is None


def test_a_job_without_a_callback_url_gets_the_projects_default(
        client: TestClient, db_session: Session, model_id: str,
        loopback_allowed: Settings) -> None:
    client.patch("/v1/project", json={"default_callback_url": HOOK})

    response = client.post("/v1/jobs", json={"model_id": model_id})

    assert response.status_code == 202, response.text
    assert response.json()["config"]["callback_url"] == HOOK
    job = db_session.get_one(Job, uuid.UUID(response.json()["id"]))
    assert job.config["callback_url"] == HOOK


def test_a_jobs_own_callback_url_or_explicit_null_wins_over_the_default(
        client: TestClient, model_id: str, loopback_allowed: Settings) -> None:
    client.patch("/v1/project", json={"default_callback_url": HOOK})
    own = "http://127.0.0.2:9/hooks/own"

    with_own = client.post("/v1/jobs", json={"model_id": model_id, "callback_url": own})
    opted_out = client.post("/v1/jobs", json={"model_id": model_id, "callback_url": None})

    assert with_own.json()["config"]["callback_url"] == own
    assert opted_out.status_code == 202, opted_out.text
    assert opted_out.json()["config"]["callback_url"] is None


def test_another_projects_default_is_not_used(
        client: TestClient, db_session: Session, settings: Settings, model_id: str) -> None:
    _, other_key = new_key(db_session, settings)
    client.patch("/v1/project", json={"default_callback_url": PUBLIC_HOOK},
                 headers=bearer(other_key))

    response = client.post("/v1/jobs", json={"model_id": model_id})

    assert response.json()["config"]["callback_url"] is None
