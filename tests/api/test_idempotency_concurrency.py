"""Idempotency-Key under concurrency: of requests with the same key at the same time exactly one
runs. The API here opens a session per request on a database of its own (the `client`
fixture's single rolled-back session cannot serve two requests at once)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from api.deps import get_api_settings, get_dispatcher, get_read_sessions, get_session
from api.main import create_app
from core.db.models import Job
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import TEST_AUTH, bearer, new_key
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import fresh_database


class HeldDispatcher(JobDispatcher):
    """The real dispatcher, whose sends wait for `release`: the request sending is in progress."""

    def __init__(self, broker_url: str) -> None:
        super().__init__(broker_url)
        self.sending = threading.Event()
        self.release = threading.Event()

    def send_job(self, job_id: uuid.UUID, config: JobConfig) -> None:
        self.sending.set()
        if not self.release.wait(60):
            raise TimeoutError("the test never released the held dispatcher")
        super().send_job(job_id, config)


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    with fresh_database(request.param, tmp_path, name="fuseforge_idempotency") as engine:
        yield sessionmaker(bind=engine, expire_on_commit=False)


@pytest.fixture
def dispatcher() -> HeldDispatcher:
    return HeldDispatcher(TEST_REDIS_URL)


@pytest.fixture
def api(sessions: sessionmaker[Session], tmp_path: Path, broker: redis.Redis,
        dispatcher: HeldDispatcher) -> Iterator[TestClient]:
    """The API with a session per request on the fresh database, sending a project's key."""
    settings = Settings(env="test", data_dir=tmp_path / "data", broker_url=TEST_REDIS_URL,
                        auth=TEST_AUTH)

    def session_per_request() -> Iterator[Session]:
        with sessions() as session:
            yield session

    app = create_app()
    app.dependency_overrides[get_session] = session_per_request
    app.dependency_overrides[get_read_sessions] = lambda: sessions
    app.dependency_overrides[get_api_settings] = lambda: settings
    app.dependency_overrides[get_dispatcher] = lambda: dispatcher
    with sessions() as session:
        _, key = new_key(session, settings)
    with TestClient(app, headers=bearer(key)) as client:
        yield client


@pytest.fixture
def job_body(api: TestClient) -> dict[str, object]:
    model = api.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert model.status_code == 201, model.text
    return {"model_id": model.json()["id"], "input_shapes": {"input": [1, 3, 32, 32]}}


def _jobs(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def test_a_repeat_while_the_first_runs_is_409_with_retry_after_then_gets_its_answer(
        api: TestClient, job_body: dict[str, object], dispatcher: HeldDispatcher,
        sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    key = {"Idempotency-Key": "slow-submit"}
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(api.post, "/v1/jobs", json=job_body, headers=key)
        assert dispatcher.sending.wait(60)  # the first request holds the key
        busy = api.post("/v1/jobs", json=job_body, headers=key)
        dispatcher.release.set()
        answered = first.result(timeout=60)

    assert busy.status_code == 409, busy.text
    assert busy.json()["error"] == "IdempotencyKeyInProgress"
    assert ("a request with this Idempotency-Key ('slow-submit') is still being processed; "
            "retry later") in busy.json()["detail"]
    assert busy.headers["retry-after"] == "2"
    assert answered.status_code == 202
    replay = api.post("/v1/jobs", json=job_body, headers=key)
    assert replay.headers["idempotent-replayed"] == "true" and replay.json() == answered.json()
    assert _jobs(sessions) == 1 and broker.llen("cpu") == 1


def test_concurrent_identical_requests_create_exactly_one_job(
        api: TestClient, job_body: dict[str, object], dispatcher: HeldDispatcher,
        sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    dispatcher.release.set()
    requests = 6
    start = threading.Barrier(requests)

    def submit() -> tuple[int, str | None, str]:
        start.wait(timeout=60)
        response = api.post("/v1/jobs", json=job_body, headers={"Idempotency-Key": "race"})
        error = response.json().get("error") if response.status_code >= 400 else None
        return response.status_code, response.headers.get("idempotent-replayed"), str(error)

    with ThreadPoolExecutor(requests) as pool:
        outcomes = [f.result(timeout=120) for f in [pool.submit(submit) for _ in range(requests)]]

    ran = [o for o in outcomes if o[:2] == (202, None)]
    others = [o for o in outcomes if o[:2] != (202, None)]
    assert len(ran) == 1, outcomes
    assert all((status, replayed) == (202, "true")
               or (status, error) == (409, "IdempotencyKeyInProgress")
               for status, replayed, error in others), outcomes
    assert _jobs(sessions) == 1 and broker.llen("cpu") == 1
