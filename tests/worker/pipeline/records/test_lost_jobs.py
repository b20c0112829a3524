"""A redelivered job whose claiming process on this host is gone fails at once, saying why;
any doubt (a live process, another host) leaves it to the stale-job sweep."""

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db import job_state
from optimizer.testing.models import model_bytes, small_cnn
from worker.pipeline.records.lost_jobs import ERROR_CODE, fail_if_its_process_died


@pytest.fixture
def running_job(client: TestClient, db_session: Session, broker: object) -> uuid.UUID:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    job_id = uuid.UUID(client.post("/v1/jobs", json={"model_id": model.json()["id"]}).json()["id"])
    return job_id


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _claim(session: Session, job_id: uuid.UUID, worker: str) -> None:
    assert job_state.claim(session, job_id, worker) is not None
    assert job_state.start_stage(session, job_id, "validate", 0.4)
    session.commit()


def test_job_of_a_dead_process_on_this_host_fails_naming_the_stage(
        client: TestClient, db_session: Session, running_job: uuid.UUID, tmp_path: Path) -> None:
    _claim(db_session, running_job, f"{socket.gethostname()}:{_dead_pid()}")
    scratch = tmp_path / str(running_job)
    scratch.mkdir()

    assert fail_if_its_process_died(db_session, running_job, tmp_path)
    db_session.commit()

    assert not scratch.exists()
    job = client.get(f"/v1/jobs/{running_job}").json()
    assert job["status"] == "failed" and job["error"]["code"] == ERROR_CODE
    assert "died in stage 'validate'" in job["error"]["message"]


@pytest.mark.parametrize("worker", [
    "this-process",  # alive: maybe a slow job, not a dead one (its id is the test's own)
    "another-host:1234",  # cannot tell from here
    "celery@h200",  # no pid
])
def test_job_of_a_live_or_unknown_process_is_left_running(
        client: TestClient, db_session: Session, running_job: uuid.UUID, worker: str,
        tmp_path: Path) -> None:
    if worker == "this-process":  # named at run time: parameters must be the same in every
        worker = f"{socket.gethostname()}:{os.getpid()}"  # pytest-xdist worker
    _claim(db_session, running_job, worker)

    assert not fail_if_its_process_died(db_session, running_job, tmp_path)
    assert client.get(f"/v1/jobs/{running_job}").json()["status"] == "running"


def test_finished_job_is_left_alone(client: TestClient, db_session: Session,
                                    running_job: uuid.UUID, tmp_path: Path) -> None:
    _claim(db_session, running_job, f"{socket.gethostname()}:{_dead_pid()}")
    assert job_state.succeed(db_session, running_job) is not None
    db_session.commit()

    assert not fail_if_its_process_died(db_session, running_job, tmp_path)
    assert client.get(f"/v1/jobs/{running_job}").json()["status"] == "succeeded"
