"""A second GPU backend gets queues of its own, from its spec: its jobs never reach a TensorRT
worker, and a host that runs only one of the two consumes only that one's queues."""

from collections.abc import Iterator

import pytest

from core.job_config import JobConfig
from core.queues import (
    backend_queues,
    can_take_gpu_jobs,
    gpu_backend_of,
    is_gpu_queue,
    job_queue,
    queue_for,
    worker_queues,
)
from tests.support.fake_gpu_backend import (
    BOTH,
    FAKE_GPU,
    FAKE_GPU_ONLY,
    TENSORRT_ONLY,
    fake_gpu_registered,
)

pytestmark = pytest.mark.usefixtures("fake_gpu_backend")


@pytest.fixture
def fake_gpu_backend() -> Iterator[None]:
    with fake_gpu_registered():
        yield


@pytest.mark.parametrize(
    ("target", "queue"),
    [(None, "fakegpu"), ("9.0", "fakegpu.sm90"), ("sm_120", "fakegpu.sm120"),
     ("NVIDIA H200", "fakegpu.h200")],
)
def test_its_jobs_go_to_its_own_queue_narrowed_by_target_gpu(target: str | None, queue: str) -> None:
    assert queue_for("fakegpu", target) == queue
    assert job_queue(JobConfig.model_construct(backend="fakegpu", target_gpu=target)) == queue


def test_tensorrt_keeps_the_queue_names_deployed_workers_use() -> None:
    assert queue_for("tensorrt", None) == "gpu" and queue_for("tensorrt", "9.0") == "gpu.sm90"
    assert queue_for("onnxruntime", None) == "cpu"
    assert backend_queues() == ["cpu", "gpu", "openvino", "fakegpu"]


def test_each_gpu_queue_belongs_to_its_backend() -> None:
    assert gpu_backend_of("fakegpu.sm90") is FAKE_GPU and gpu_backend_of("fakegpu") is FAKE_GPU
    assert gpu_backend_of("gpu.sm90") is not FAKE_GPU and is_gpu_queue("gpu.sm90")
    assert gpu_backend_of("cpu") is None and not is_gpu_queue("fakegpu2")


def test_a_host_that_runs_only_tensorrt_does_not_consume_its_queues() -> None:
    assert worker_queues(["cpu", "gpu", "fakegpu", "fakegpu.sm90"], TENSORRT_ONLY) == (
        ["gpu.sm90", "gpu.h200"], ["fakegpu", "fakegpu.sm90"])
    assert worker_queues(["fakegpu"], TENSORRT_ONLY) == ([], ["fakegpu"])
    assert not can_take_gpu_jobs(TENSORRT_ONLY, ["fakegpu"])


def test_a_host_that_runs_only_it_does_not_consume_tensorrts_queues() -> None:
    assert worker_queues(["cpu", "gpu", "fakegpu"], FAKE_GPU_ONLY) == (
        ["fakegpu.sm90", "fakegpu.h200"], ["gpu"])
    assert worker_queues(["gpu", "gpu.h200"], FAKE_GPU_ONLY) == ([], ["gpu", "gpu.h200"])
    assert can_take_gpu_jobs(FAKE_GPU_ONLY, ["fakegpu"]) and can_take_gpu_jobs(FAKE_GPU_ONLY)
    assert not can_take_gpu_jobs(FAKE_GPU_ONLY, ["cpu", "gpu"])


def test_a_host_that_runs_both_consumes_both_sets_of_queues() -> None:
    assert worker_queues(["gpu", "fakegpu"], BOTH) == (
        ["gpu.sm90", "gpu.h200", "fakegpu.sm90", "fakegpu.h200"], [])
