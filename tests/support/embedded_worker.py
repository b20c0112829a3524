"""The embedded worker's handle and a stage's run: what pipeline tests drive.

`EmbeddedWorker` is the API (TestClient) and a worker thread on the real Redis broker (the
`embedded` fixture in tests/worker/conftest.py builds one); `job_run` is what a
stage function is handed, for tests that call one stage directly.
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
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from core.job_config import JobConfig
from core.settings import Settings, StageLimit, StageLimits
from core.storage import LocalArtifactStore
from optimizer.capabilities import HostCapabilities
from tests.support.fake_tensorrt import FAKE_TENSORRT
from worker.pipeline.results import JobRun
from worker.runtime import WorkerRuntime, use_runtime

__all__ = ["FAKE_TOOLKIT", "EmbeddedWorker", "embedded_runtime", "job_run"]

FAKE_TOOLKIT = "tests.support.fake_tensorrt:FAKE_TENSORRT"
_JOB_TIMEOUT_S = 240


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
        with self.job_settings(stage_limits=StageLimits(**stages)):
            yield

    @contextmanager
    def job_settings(self, **fields: Any) -> Iterator[None]:
        """Run jobs with these `jobs.*` settings (e.g. first_run_limit_s=2) in the block."""
        jobs = self.runtime.settings.jobs.model_copy(update=fields)
        settings = self.runtime.settings.model_copy(update={"jobs": jobs})
        with use_runtime(replace(self.runtime, settings=settings)):
            yield

    @contextmanager
    def settings(self, **fields: Any) -> Iterator[None]:
        """Run jobs with these top-level settings (e.g. plugins=(...)) in the block."""
        settings = self.runtime.settings.model_copy(update=fields)
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


def embedded_runtime(settings: Settings, engine: Engine,
                     capabilities: HostCapabilities) -> WorkerRuntime:
    """The worker's runtime on `engine`'s database, with FakeTensorRT as its toolkit."""
    return WorkerRuntime(settings=settings, sessions=sessionmaker(bind=engine, expire_on_commit=False),
                         store=LocalArtifactStore(settings.artifacts_dir), toolkit=FAKE_TENSORRT,
                         capabilities=capabilities)


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

