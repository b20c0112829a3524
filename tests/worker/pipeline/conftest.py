"""An embedded Celery worker, in this process, on the real Redis broker, running jobs the API
created in a fresh database, with FakeTensorRT standing in for TensorRT and a GPU.

Unlike tests/e2e (separate processes, for deployment claims), these drive the pipeline's own
code paths (stages, fallback, outcome, cancel) where a failure points at a line.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx
import pytest
import redis
from celery.contrib.testing.worker import start_worker
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.deps import get_api_settings, get_read_sessions, get_session
from api.main import create_app
from core.job_config import JobConfig
from core.queues import WEBHOOK_QUEUE
from core.settings import Settings, StageLimit, StageLimits
from core.storage import LocalArtifactStore
from optimizer.capabilities import HostCapabilities
from tests.conftest import TEST_REDIS_URL
from tests.support.api_keys import TEST_AUTH, bearer, new_key
from tests.support.databases import fresh_database
from tests.support.fake_tensorrt import FAKE_TENSORRT
from worker.celery_app import celery_app
from worker.pipeline.results import JobRun
from worker.runtime import WorkerRuntime, use_runtime
from worker.tasks import deliver_webhook as _registers_webhooks  # noqa: F401
from worker.tasks import run_job as _registers_the_tasks  # noqa: F401

__all__ = ["EmbeddedWorker"]

FAKE_TOOLKIT = "tests.support.fake_tensorrt:FAKE_TENSORRT"
_JOB_TIMEOUT_S = 240


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def worker_database(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A database of its own: these jobs commit for real, which the rolled-back sessions of
    the other tests must not see."""
    with fresh_database(request.param, tmp_path_factory.mktemp("worker"),
                        name="fuseforge_worker") as engine:
        yield engine


@dataclass
class EmbeddedWorker:
    client: TestClient
    runtime: WorkerRuntime

    def upload(self, data: bytes, filename: str = "model.onnx") -> str:
        response = self.client.post("/v1/models", files={"file": (filename, data)})
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])

    def submit(self, model_id: str, **config: Any) -> str:
        response = self.client.post("/v1/jobs", json={"model_id": model_id, **config})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    @contextmanager
    def limits(self, **stages: StageLimit) -> Iterator[None]:
        """Run jobs with these stage limits (e.g. validate=StageLimit(wall_s=3)) in the block."""
        jobs = self.runtime.settings.jobs
        settings = self.runtime.settings.model_copy(update={"jobs": jobs.model_copy(
            update={"stage_limits": StageLimits(**stages)})})
        with use_runtime(replace(self.runtime, settings=settings)):
            yield

    def wait(self, job_id: str, timeout_s: float = _JOB_TIMEOUT_S) -> dict[str, Any]:
        """The job once it has finished (succeeded, failed or cancelled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
            time.sleep(0.05)


def _runtime(settings: Settings, engine: Engine, capabilities: HostCapabilities) -> WorkerRuntime:
    return WorkerRuntime(settings=settings, sessions=sessionmaker(bind=engine, expire_on_commit=False),
                         store=LocalArtifactStore(settings.artifacts_dir), toolkit=FAKE_TENSORRT,
                         capabilities=capabilities)


@pytest.fixture(scope="module")
def embedded(worker_database: Engine, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[EmbeddedWorker]:
    """The API (TestClient) and a worker thread consuming "cpu", "gpu" and "webhooks" from
    Redis."""
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
    runtime = _runtime(settings, worker_database, FAKE_TENSORRT.detect_capabilities())
    with (
        use_runtime(runtime),
        start_worker(celery_app, pool="solo", perform_ping_check=False,
                     queues=["cpu", "gpu", WEBHOOK_QUEUE],
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


def job_run(tmp_path: Path, model: onnx.ModelProto, config: dict[str, Any]) -> JobRun:
    """A run of `model` (written to tmp_path) with `config` (JobConfig fields; the backend is
    tensorrt unless given) and a scratch folder: what a stage function is handed."""
    model_path = tmp_path / "model.onnx"
    onnx.save(model, model_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    settings = Settings(env="test", data_dir=tmp_path / "data")
    return JobRun(job_id=uuid.uuid4(), config=JobConfig(**{"backend": "tensorrt", **config}),
                  model_path=model_path, dataset_path=None, scratch_dir=scratch,
                  settings=settings, store=LocalArtifactStore(settings.artifacts_dir))

