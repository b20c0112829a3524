"""Every backend has a queue, the one its spec names; GPU backends' queues are each their own."""

import pytest

from core.job_config import JobConfig
from core.queues import (
    CPU_QUEUE,
    GPU_QUEUE,
    backend_queues,
    can_take_gpu_jobs,
    job_queue,
    queue_for,
)
from optimizer.capabilities import GpuInfo, HostCapabilities
from optimizer.registries.backends import BACKENDS, Backend, QueueKind


def test_every_backend_has_the_queue_its_spec_names() -> None:
    for name, spec in BACKENDS.items():
        assert queue_for(name, None) == spec.queue_name
    assert backend_queues() == ["cpu", "gpu", "openvino"]
    assert (CPU_QUEUE, GPU_QUEUE) == ("cpu", "gpu")  # what deployed workers are started on


def test_no_two_backends_of_different_kinds_or_two_gpu_backends_share_a_queue() -> None:
    # A GPU backend's queue is consumed only where that backend runs: a shared one would hand
    # its jobs to hosts that cannot build them. A dot would make it look like a narrowed queue.
    gpu = [spec.queue_name for spec in BACKENDS.values() if spec.queue is QueueKind.GPU]
    cpu = {spec.queue_name for spec in BACKENDS.values() if spec.queue is QueueKind.CPU}
    assert len(set(gpu)) == len(gpu) and not cpu & set(gpu)
    assert all("." not in spec.queue_name for spec in BACKENDS.values())


@pytest.mark.parametrize("backend", list(Backend))
def test_a_default_job_on_each_backend_goes_to_its_queue(backend: Backend) -> None:
    assert job_queue(JobConfig(backend=backend)) == BACKENDS[backend].queue_name


def test_a_stored_jobs_backend_name_finds_its_queue() -> None:
    assert queue_for("tensorrt", "9.0") == "gpu.sm90"
    assert queue_for("onnxruntime", None) == "cpu"


def test_an_unknown_backend_name_has_no_queue() -> None:
    with pytest.raises(ValueError, match="no backend 'coreml' has a queue"):
        queue_for("coreml", None)


def test_gpu_jobs_are_taken_by_a_host_that_runs_a_gpu_backend() -> None:
    gpu = GpuInfo(index=0, name="NVIDIA H200", compute_capability="9.0", memory_total_mib=None)
    assert can_take_gpu_jobs(HostCapabilities(gpus=(gpu,), tensorrt_version="10.16.1"))
    assert not can_take_gpu_jobs(HostCapabilities(gpus=(gpu,)))
    assert not can_take_gpu_jobs(HostCapabilities(tensorrt_version="10.16.1"))
