"""A disk that fills while a job writes fails the job as InsufficientStorage, naming the folder
and its free space, with nothing of it kept; not as an internal error of FuseForge's.

The fault is real and needs no root: the stack's worker runs with a file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored), inherited by each job's process, so the job's first write
past it fails with EFBIG, the error a filesystem's own size limit gives (ENOSPC, a full disk,
is told apart the same way: core/disk_space.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import httpx
import pytest

from optimizer.testing.models import model_bytes
from optimizer.testing.quantization_models import conv_stack
from tests.e2e.flows import upload
from tests.e2e.stacks import Stack, running_stack
from tests.support.private_services import private_redis
from tests.support.processes import Service, wait_for_job
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

FILE_SIZE_LIMIT = 2 * 1024 * 1024  # the worker's log and the small files stay under it
_UNDER_RLIMIT = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv[0] = "fuseforge"
runpy.run_module("fuseforge_cli.main", run_name="__main__")
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("full-disk")
    with private_redis(tmp) as broker, running_stack(tmp, name="fulldisk", redis_url=broker.url,
                                                     queues="cpu") as running:
        running.worker.stop()  # its place is taken by one that cannot write big files
        running.worker = Service(
            [sys.executable, "-c", _UNDER_RLIMIT, str(FILE_SIZE_LIMIT), "worker", "--queues",
             "cpu"], running.environment, tmp / "worker-rlimit.log")
        yield running


def test_a_job_whose_writes_find_no_room_fails_naming_the_folder_and_keeps_nothing(
        stack: Stack) -> None:
    big = conv_stack(seed=5, channels=256, size=8, blocks=4)  # weights over the 2 MiB limit
    data = model_bytes(big)
    assert len(data) > FILE_SIZE_LIMIT
    model = upload(stack.base_url, data, "big.onnx")  # the API has no limit: it stores it
    created = httpx.post(f"{stack.base_url}/v1/jobs", json={
        "model_id": model["id"], "benchmark": {"warmup": 1, "iterations": 3},
        "validation": {"samples": 2}}, timeout=30)
    assert created.status_code == 202, created.text

    job = wait_for_job(stack.base_url, created.json()["id"])

    assert job["status"] == "failed", job
    error = job["error"]
    assert error["code"] == "InsufficientStorage", error
    assert "found no room: File too large" in error["message"], error
    assert " free of " in error["message"] and "on its disk" in error["message"], error
    assert "FUSEFORGE_DATA_DIR" in error["message"]
    assert "internally" not in error["message"]
    assert not job["artifacts"]
    scratch = stack.data_dir / "scratch"
    # The job's end is recorded by its process; its supervisor removes the stage mark just
    # after that process exits, so wait a moment for it (CI once looked in between).
    wait_until(lambda: not any(scratch.glob(f"{job['id']}*")), timeout_s=10,
               what=lambda: f"the job's scratch to go: {list(scratch.iterdir())}")
