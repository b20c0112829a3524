"""Callback URLs on submit: refused when malformed or pointing at a non-public address (unless
allowed), shown on the job; cancelling a queued job sends its webhook task."""

import base64
import json

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.deps import get_api_settings
from core.db.models import Job
from core.settings import Settings, WebhookSettings
from optimizer.testing.models import model_bytes, small_cnn


@pytest.fixture
def model_id(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.fixture
def loopback_allowed(client: TestClient, settings: Settings) -> Settings:
    # The client's own settings (its API key's secret among them), callbacks to 127/8 allowed.
    allowed = settings.model_copy(update={
        "webhooks": WebhookSettings(allowed_networks=["127.0.0.0/8"])})
    client.app.dependency_overrides[get_api_settings] = lambda: allowed  # type: ignore[attr-defined]
    return allowed


@pytest.mark.parametrize(("url", "kind"), [
    ("http://127.0.0.1:8080/hook", "a loopback address"),
    ("http://localhost/hook", "a loopback address"),
    ("http://10.0.0.5/hook", "a private address"),
    ("http://192.168.1.10/hook", "a private address"),
    ("http://169.254.169.254/latest/meta-data", "a link-local address"),
    ("http://[::1]:9000/hook", "a loopback address"),
    ("http://[::ffff:127.0.0.1]/hook", "a loopback address"),
    ("http://[fd00::1]/hook", "a private address"),
    ("http://0.0.0.0/hook", "an unspecified address"),
])
def test_a_callback_to_a_non_public_address_is_422_and_nothing_is_stored(
        client: TestClient, db_session: Session, broker: redis.Redis, model_id: str, url: str,
        kind: str) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "callback_url": url})

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidJobConfig"
    assert body["detail"].startswith("callback_url: host ") and kind in body["detail"]
    assert "FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS" in body["detail"]
    assert db_session.scalar(select(func.count()).select_from(Job)) == 0
    assert broker.llen("cpu") == 0


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://example.com/hook", "callback_url: the scheme must be http or https, not 'ftp'"),
    ("https://user:secret@example.com/hook", "callback_url: must not carry credentials"),
    ("https://example.com/" + "a" * 3000, "callback_url: is 3020 characters long"),
])
def test_a_malformed_callback_url_is_422_naming_the_problem(
        client: TestClient, model_id: str, url: str, problem: str) -> None:
    response = client.post("/v1/jobs", json={"model_id": model_id, "callback_url": url})

    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(problem)


def test_an_allowed_network_accepts_the_callback_and_the_job_shows_it(
        client: TestClient, model_id: str, loopback_allowed: Settings) -> None:
    url = "http://127.0.0.1:9/hook"
    response = client.post("/v1/jobs", json={"model_id": model_id, "callback_url": url})

    assert response.status_code == 202, response.text
    job = client.get(f"/v1/jobs/{response.json()['id']}").json()
    assert job["config"]["callback_url"] == url
    assert job["webhook_deliveries"] == []


def test_cancelling_a_queued_job_with_a_callback_sends_its_webhook_task(
        client: TestClient, broker: redis.Redis, model_id: str, loopback_allowed: Settings
) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id,
                                           "callback_url": "http://127.0.0.1:9/hook"}).json()["id"]
    assert broker.llen("webhooks") == 0  # nothing until the job ends

    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200

    [raw] = broker.lrange("webhooks", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "webhooks.deliver"
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([job_id], {})


def test_cancelling_a_job_without_a_callback_sends_no_webhook_task(
        client: TestClient, broker: redis.Redis, model_id: str) -> None:
    job_id = client.post("/v1/jobs", json={"model_id": model_id}).json()["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert broker.llen("webhooks") == 0
