"""A redelivered job whose claiming process on this host is gone fails at once, saying why (a
search in its search stage goes back to the queue to resume instead, a bounded number of
times); any doubt (a live process, another host) leaves it to the stale-job sweep."""

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
from worker.pipeline.records.lost_jobs import (
    ERROR_CODE,
    MAX_SEARCH_RESUMES,
    LostJob,
    fail_if_its_process_died,
)


def _job(client: TestClient, **config: object) -> uuid.UUID:
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    response = client.post("/v1/jobs", json={"model_id": model.json()["id"], **config})
    return uuid.UUID(response.json()["id"])


@pytest.fixture
def running_job(client: TestClient, db_session: Session, broker: object) -> uuid.UUID:
    return _job(client)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _claim(session: Session, job_id: uuid.UUID, worker: str, stage: str = "validate") -> None:
    assert job_state.claim(session, job_id, worker) is not None
    assert job_state.start_stage(session, job_id, stage, 0.4)
    session.commit()


def test_job_of_a_dead_process_on_this_host_fails_naming_the_stage(
        client: TestClient, db_session: Session, running_job: uuid.UUID, tmp_path: Path) -> None:
    _claim(db_session, running_job, f"{socket.gethostname()}:{_dead_pid()}")
    scratch = tmp_path / str(running_job)
    scratch.mkdir()

    assert fail_if_its_process_died(db_session, running_job, tmp_path) is LostJob.FAILED
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

    assert fail_if_its_process_died(db_session, running_job, tmp_path) is LostJob.NOT_LOST
    assert client.get(f"/v1/jobs/{running_job}").json()["status"] == "running"


def test_finished_job_is_left_alone(client: TestClient, db_session: Session,
                                    running_job: uuid.UUID, tmp_path: Path) -> None:
    _claim(db_session, running_job, f"{socket.gethostname()}:{_dead_pid()}")
    assert job_state.succeed(db_session, running_job) is not None
    db_session.commit()

    assert fail_if_its_process_died(db_session, running_job, tmp_path) is LostJob.NOT_LOST
    assert client.get(f"/v1/jobs/{running_job}").json()["status"] == "succeeded"


def test_a_search_whose_process_died_in_its_search_is_requeued_until_it_died_too_often(
        client: TestClient, db_session: Session, broker: object, tmp_path: Path) -> None:
    job_id = _job(client, search={"time_budget_s": 60})
    for resume in range(MAX_SEARCH_RESUMES):
        _claim(db_session, job_id, f"{socket.gethostname()}:{_dead_pid()}", stage="search")
        assert fail_if_its_process_died(db_session, job_id, tmp_path) is LostJob.REQUEUED
        db_session.commit()
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "queued", resume
        assert "the search resumes at its next candidate" in job["events"][-1]["message"]

    _claim(db_session, job_id, f"{socket.gethostname()}:{_dead_pid()}", stage="search")
    assert fail_if_its_process_died(db_session, job_id, tmp_path) is LostJob.FAILED
    db_session.commit()
    assert client.get(f"/v1/jobs/{job_id}").json()["error"]["code"] == ERROR_CODE


def test_a_search_that_died_after_its_search_fails_like_any_job(
        client: TestClient, db_session: Session, broker: object, tmp_path: Path) -> None:
    job_id = _job(client, search={"time_budget_s": 60})
    _claim(db_session, job_id, f"{socket.gethostname()}:{_dead_pid()}", stage="benchmark")

    assert fail_if_its_process_died(db_session, job_id, tmp_path) is LostJob.FAILED
