"""Jobs go to the queue of their backend, narrowed to a GPU's own queue by target_gpu; a worker
asked for GPU queues takes its GPU's queues if it can build TensorRT engines, and none if not."""

import pytest

from core.job_config import JobConfig
from core.queues import gpu_queues, job_queue, worker_queues
from optimizer.capabilities import GpuInfo, HostCapabilities

H200 = GpuInfo(0, "NVIDIA H200", "9.0", 143771)
GPU_HOST = HostCapabilities(gpus=(H200,), tensorrt_version="10.16.1")


@pytest.mark.parametrize(
    ("config", "queue"),
    [
        ({"backend": "onnxruntime"}, "cpu"),
        ({"backend": "tensorrt"}, "gpu"),
        ({"backend": "tensorrt", "target_gpu": None}, "gpu"),
        ({"backend": "tensorrt", "target_gpu": "9.0"}, "gpu.sm90"),
        ({"backend": "tensorrt", "target_gpu": "sm_120"}, "gpu.sm120"),
        ({"backend": "tensorrt", "target_gpu": "H200"}, "gpu.h200"),
        ({"backend": "tensorrt", "target_gpu": "NVIDIA H200"}, "gpu.h200"),
    ],
)
def test_job_queue_follows_backend_and_target_gpu(config: dict[str, str], queue: str) -> None:
    assert job_queue(JobConfig.model_validate(config)) == queue


def test_gpu_worker_consumes_any_gpu_its_compute_capability_and_its_model() -> None:
    assert gpu_queues(H200, "gpu") == ["gpu", "gpu.sm90", "gpu.h200"]
    assert gpu_queues(GpuInfo(0, "Tesla T4", None, 15360), "gpu") == ["gpu", "gpu.tesla-t4"]
    # Each queue a job can name is one this worker consumes.
    for target in ("9.0", "sm90", "H200", "NVIDIA H200"):
        assert job_queue(JobConfig(backend="tensorrt", target_gpu=target)) in gpu_queues(H200, "gpu")


def test_capable_worker_asked_for_gpu_adds_its_gpus_queues() -> None:
    assert worker_queues(["gpu"], GPU_HOST) == (["gpu.sm90", "gpu.h200"], [])
    assert worker_queues(["cpu", "gpu", "gpu.sm90"], GPU_HOST) == (["gpu.h200"], [])


def test_worker_that_cannot_build_tensorrt_drops_every_gpu_queue() -> None:
    no_gpu = HostCapabilities(notes=("nvidia-smi not found",))
    assert worker_queues(["cpu", "gpu", "gpu.sm90"], no_gpu) == ([], ["gpu", "gpu.sm90"])
    gpu_without_trt = HostCapabilities(gpus=(H200,))
    assert worker_queues(["gpu"], gpu_without_trt) == ([], ["gpu"])


def test_cpu_worker_keeps_its_queues_untouched() -> None:
    assert worker_queues(["cpu"], GPU_HOST) == ([], [])
