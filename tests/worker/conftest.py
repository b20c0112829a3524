"""An embedded Celery worker, in this process, on the real Redis broker, running jobs the API
created in a fresh database, with FakeTensorRT standing in for TensorRT and a GPU.

Unlike tests/e2e (separate processes, for deployment claims), these drive the pipeline's own
code paths (stages, fallback, outcome, cancel) where a failure points at a line. The handle
the tests use lives in tests/support/embedded_worker.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.deps import get_api_settings, get_read_sessions, get_session
from api.main import create_app
from core.queues import WEBHOOK_QUEUE
from core.settings import Settings
from tests.support.api_keys import TEST_AUTH, bearer, new_key
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import fresh_database
from tests.support.embedded_worker import FAKE_TOOLKIT, EmbeddedWorker, embedded_runtime
from tests.support.fake_tensorrt import FAKE_TENSORRT
from worker.celery_app import celery_app
from worker.runtime import use_runtime
from worker.tasks import deliver_webhook as _registers_webhooks  # noqa: F401
from worker.tasks import run_job as _registers_the_tasks  # noqa: F401


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def worker_database(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A database of its own: these jobs commit for real, which the rolled-back sessions of
    the other tests must not see."""
    with fresh_database(request.param, tmp_path_factory.mktemp("worker"),
                        name="fuseforge_worker") as engine:
        yield engine


@pytest.fixture(scope="module")
def embedded(worker_database: Engine, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[EmbeddedWorker]:
    """The API (TestClient) and a worker thread consuming "cpu", "gpu", "openvino" and
    "webhooks" from Redis."""
    data_dir = tmp_path_factory.mktemp("embedded") / "data"
    settings = Settings(env="test", data_dir=data_dir, broker_url=TEST_REDIS_URL,
                        database_url=worker_database.url.render_as_string(hide_password=False),
                        tensorrt_toolkit=FAKE_TOOLKIT, auth=TEST_AUTH)
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()
    sessions = sessionmaker(bind=worker_database, expire_on_commit=False)
    with sessions() as key_session:
        _, key = new_key(key_session, settings)

    def session() -> Iterator[Session]:
        with sessions() as s:
            yield s

    app = create_app()
    app.dependency_overrides[get_session] = session
    app.dependency_overrides[get_read_sessions] = lambda: sessions
    app.dependency_overrides[get_api_settings] = lambda: settings
    runtime = embedded_runtime(settings, worker_database, FAKE_TENSORRT.detect_capabilities())
    with (
        use_runtime(runtime),
        start_worker(celery_app, pool="solo", perform_ping_check=False,
                     queues=["cpu", "gpu", "openvino", WEBHOOK_QUEUE],
                     shutdown_timeout=30),
        TestClient(app, headers=bearer(key)) as client,
    ):
        yield EmbeddedWorker(client=client, runtime=runtime)
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()


@pytest.fixture
def fake_tensorrt_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """FakeTensorRT's control file (see tests/support/fake_tensorrt.py), empty at first."""
    path = tmp_path / "fake-tensorrt.json"
    path.write_text("{}")
    monkeypatch.setenv("FAKE_TENSORRT_CONTROL", str(path))
    return path
