"""A job's log lines in FUSEFORGE_LOG_FORMAT=json: the worker's and those of the job's own
process, every one a JSON object carrying the job id."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from core.dispatch import dispatcher_for
from core.job_config import JobConfig
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.broker import TEST_REDIS_URL
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.json_logs import captured_json_log
from worker.runtime import use_runtime

IMPOSSIBLE = {"atol": 1e-12, "rtol": 0, "samples": 2}  # fails validation: the run logs why
FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}


@pytest.fixture
def worker_log() -> Iterator[io.StringIO]:
    """This process's log (the embedded worker's thread) as JSON lines, at INFO."""
    with captured_json_log("worker") as stream:
        yield stream


def test_every_line_of_a_job_is_json_with_its_job_id(
        embedded: EmbeddedWorker, worker_log: io.StringIO,
        capfd: pytest.CaptureFixture[str]) -> None:
    settings = embedded.runtime.settings.model_copy(update={"log_format": "json"})
    model_id = embedded.upload(model_bytes(small_cnn(seed=31)), "cnn.onnx")
    with use_runtime(replace(embedded.runtime, settings=settings)):
        job = embedded.wait(embedded.submit(model_id, validation=IMPOSSIBLE,
                                            benchmark=FAST_BENCHMARK))
    assert job["status"] == "failed", job

    # The job's process writes to the stderr it inherited from this one.
    job_lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    job_entries = [json.loads(line) for line in job_lines]
    assert job_entries, "the job's process logged nothing"
    assert all(e["job_id"] == job["id"] and e["process"] == "job" for e in job_entries)
    assert any("AccuracyMismatchError" in e["message"] for e in job_entries)
    # The worker's own lines about the job (here: a redelivered message it skips) carry it too.
    dispatcher_for(TEST_REDIS_URL).send_job(uuid.UUID(job["id"]),
                                            JobConfig.model_validate(job["config"]))
    deadline = time.monotonic() + 60
    while "not queued any more" not in worker_log.getvalue():
        assert time.monotonic() < deadline, "the worker did not take the redelivered message"
        time.sleep(0.05)
    worker_entries = [json.loads(line) for line in worker_log.getvalue().splitlines()]
    [skipped] = [e for e in worker_entries if "not queued any more" in e["message"]]
    assert skipped["job_id"] == job["id"] and skipped["logger"] == "worker.supervision.supervisor"
