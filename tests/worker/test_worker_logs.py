"""A real worker process (`fuseforge worker`) with FUSEFORGE_LOG_FORMAT=json logs JSON lines
only, Celery's start-up banner and warnings included."""

import json
import time
from pathlib import Path

from core.queues import backend_queues
from tests.support.broker import TEST_REDIS_URL
from tests.support.processes import FUSEFORGE, Service, fuseforge_env

# Celery prints this itself on SIGTERM, past any logging set-up.
_CELERY_SHUTDOWN_NOTICE = "worker: Warm shutdown (MainProcess)"


def test_worker_in_json_format_logs_only_json_lines(tmp_path: Path) -> None:
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_BROKER_URL=TEST_REDIS_URL, FUSEFORGE_LOG_FORMAT="json")
    migrate = Service([*FUSEFORGE, "migrate"], env, tmp_path / "migrate.log")
    assert migrate.process.wait(timeout=120) == 0, migrate.output()
    worker = Service([*FUSEFORGE, "worker", "--queues", "cpu"], env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 60
        while " ready." not in worker.output():
            assert worker.process.poll() is None, worker.output()
            assert time.monotonic() < deadline, worker.output()
            time.sleep(0.1)
    finally:
        worker.stop()

    lines = [line for line in worker.output().splitlines()
             if line.strip() and line != _CELERY_SHUTDOWN_NOTICE]
    entries = [json.loads(line) for line in lines]
    assert all(e["process"] == "worker" and {"ts", "level", "logger", "message"} <= e.keys()
               for e in entries)
    assert any(e["logger"] == "worker.celery_app" and "queues: cpu" in e["message"]
               for e in entries)


def test_a_cpu_worker_asked_for_every_queue_logs_no_error(tmp_path: Path) -> None:
    """`fuseforge run` starts its worker on every backend's queue; on a host without a GPU the
    GPU queues are dropped, an expected state said at INFO, never at ERROR."""
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_BROKER_URL=TEST_REDIS_URL, FUSEFORGE_LOG_FORMAT="json")
    migrate = Service([*FUSEFORGE, "migrate"], env, tmp_path / "migrate.log")
    assert migrate.process.wait(timeout=120) == 0, migrate.output()
    worker = Service([*FUSEFORGE, "worker", "--queues", ",".join(backend_queues())], env,
                     tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 60
        while " ready." not in worker.output():
            assert worker.process.poll() is None, worker.output()
            assert time.monotonic() < deadline, worker.output()
            time.sleep(0.1)
    finally:
        worker.stop()

    entries = [json.loads(line) for line in worker.output().splitlines()
               if line.strip() and line != _CELERY_SHUTDOWN_NOTICE]
    assert [e["message"] for e in entries if e["level"] in ("ERROR", "CRITICAL")] == []
    [capabilities] = [e["message"] for e in entries
                      if e["logger"] == "worker.celery_app" and "capabilities: " in e["message"]
                      and "queues: " in e["message"]]
    if "no NVIDIA GPU" in capabilities:  # this host: the GPU queues dropped, said plainly
        [dropped] = [e for e in entries if "takes no" in e["message"]]
        assert dropped["level"] == "INFO"
        assert "They wait in queue" in dropped["message"]
