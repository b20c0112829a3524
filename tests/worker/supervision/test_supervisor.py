"""Each job runs in a process of its own that the worker holds to its stage limits and kills on
cancel: a hostile model (an endless Loop) or a crash costs that job alone, within seconds, and
the worker takes the next job at once. Run by an embedded worker on the real Redis broker."""

from __future__ import annotations

import json
import time
from pathlib import Path

from core.settings import StageLimit
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.hostile_models import data_dependent_endless_loop as endless_loop

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}


def test_an_endless_loop_fails_its_stage_at_the_limit_and_the_next_job_runs_at_once(
        embedded: EmbeddedWorker) -> None:
    hostile = embedded.upload(model_bytes(endless_loop()), "loop.onnx")
    valid = embedded.upload(model_bytes(small_cnn(seed=31)), "cnn.onnx")
    # The load stage runs the model once before writing its static copy: it never returns.
    # A valid model's load takes well under a second (its process starts pre-imported).
    with embedded.limits(load=StageLimit(wall_s=4)):
        started = time.monotonic()
        stuck = embedded.submit(hostile, benchmark=FAST_BENCHMARK)
        after = embedded.submit(valid, benchmark=FAST_BENCHMARK)
        job = embedded.wait(stuck, timeout_s=120)
        failed_after = time.monotonic() - started
        next_job = embedded.wait(after, timeout_s=120)

    assert job["status"] == "failed" and job["error"]["code"] == "JobLimitExceeded"
    message = job["error"]["message"]
    assert "Stage 'load'" in message and "wall-clock limit of 4 s" in message
    assert "FUSEFORGE_JOBS__STAGE_LIMITS__LOAD__WALL_S" in message
    assert failed_after < 60  # the stage's 4 s, plus starting the job's process
    assert next_job["status"] == "succeeded", next_job["error"]
    assert not (embedded.runtime.settings.scratch_dir / stuck).exists()


def test_an_endless_loop_is_stopped_inside_its_run_naming_the_loop_node(
        embedded: EmbeddedWorker) -> None:
    # Under the stage's limit (10 minutes by default), the run itself is stopped at the job's
    # first-run limit (optimizer/backends/onnxruntime/run_limits.py).
    hostile = embedded.upload(model_bytes(endless_loop()), "loop.onnx")
    with embedded.job_settings(first_run_limit_s=2):
        started = time.monotonic()
        job_id = embedded.submit(hostile, benchmark=FAST_BENCHMARK)
        job = embedded.wait(job_id, timeout_s=120)
        failed_after = time.monotonic() - started

    assert job["status"] == "failed" and job["error"]["code"] == "InferenceTimeLimitError"
    message = job["error"]["message"]
    assert "after 2 s in Loop node 'forever'" in message
    assert "FUSEFORGE_JOBS__FIRST_RUN_LIMIT_S" in message
    assert job["stage"] == "load"
    assert failed_after < 60  # the 2 s, plus starting the job's process
    assert not (embedded.runtime.settings.scratch_dir / job_id).exists()


def test_a_stage_over_its_memory_limit_fails_naming_the_limit(embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=32)), "cnn.onnx")
    with embedded.limits(load=StageLimit(max_rss_gib=0.05)):  # less than Python with onnx needs
        job = embedded.wait(embedded.submit(model_id, benchmark=FAST_BENCHMARK), timeout_s=120)

    assert job["status"] == "failed" and job["error"]["code"] == "JobLimitExceeded"
    assert "over its limit of 0.05 GiB" in job["error"]["message"]
    assert "FUSEFORGE_JOBS__STAGE_LIMITS__LOAD__MAX_RSS_GIB" in job["error"]["message"]


def test_cancel_stops_a_running_stage_within_seconds(embedded: EmbeddedWorker) -> None:
    hostile = embedded.upload(model_bytes(endless_loop()), "loop.onnx")
    job_id = embedded.submit(hostile, benchmark=FAST_BENCHMARK)
    deadline = time.monotonic() + 120
    while embedded.job(job_id)["stage"] != "load":  # its trial run of the model never returns
        assert time.monotonic() < deadline, "the job never started its load stage"
        time.sleep(0.05)
    time.sleep(1)  # inside ONNX Runtime's run now, which nothing interrupts
    cancelled_at = time.monotonic()
    assert embedded.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    # The README's claim: the supervisor sees the cancel at its next row check (every second)
    # and kills the job's process; its scratch folder goes right after the kill.
    scratch = embedded.runtime.settings.scratch_dir / job_id
    while scratch.exists():
        assert time.monotonic() - cancelled_at < 5, "the job's process outlived its cancel"
        time.sleep(0.05)
    killed_after_s = time.monotonic() - cancelled_at
    print(f"cancel to the job's process killed and its scratch gone: {killed_after_s:.2f} s")
    valid = embedded.upload(model_bytes(small_cnn(seed=33)), "cnn.onnx")
    next_job = embedded.wait(embedded.submit(valid, benchmark=FAST_BENCHMARK), timeout_s=120)

    assert next_job["status"] == "succeeded", next_job["error"]
    # The worker was free again well before the load stage's 10-minute limit.
    assert time.monotonic() - cancelled_at < 60
    job = embedded.job(job_id)
    assert job["status"] == "cancelled" and job["error"] is None
    assert not (embedded.runtime.settings.scratch_dir / job_id).exists()


def test_a_crash_in_the_jobs_process_fails_that_job_naming_the_stage(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    fake_tensorrt_control.write_text(json.dumps({"crash_inference": True}))
    model_id = embedded.upload(model_bytes(small_cnn(seed=34)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, backend="tensorrt", benchmark=FAST_BENCHMARK))
    fake_tensorrt_control.write_text("{}")

    assert job["status"] == "failed" and job["error"]["code"] == "WorkerProcessDied"
    assert "died in stage 'validate' before the job finished" in job["error"]["message"]
    assert "SIGSEGV" in job["error"]["message"]
    assert job["artifacts"] == []
    after = embedded.wait(embedded.submit(model_id, backend="tensorrt", benchmark=FAST_BENCHMARK))
    assert after["status"] == "succeeded", after["error"]
