"""The TensorRT backend refuses, up front, a host that cannot build engines, saying what is
missing."""

from optimizer.capabilities import GpuInfo, HostCapabilities
from worker.pipeline.backends.tensorrt import refusal_for

H200 = GpuInfo(0, "NVIDIA H200", "9.0", 143771, "GPU-6f3d", "570.124.06")
GPU_HOST = HostCapabilities(gpus=(H200,), tensorrt_version="11.4.0")
CPU_HOST = HostCapabilities(notes=("nvidia-smi not found",))


def test_tensorrt_job_on_a_host_without_gpu_is_refused_saying_what_is_missing() -> None:
    assert refusal_for(GPU_HOST) is None
    message = refusal_for(CPU_HOST)
    assert message is not None
    assert "needs a worker with an NVIDIA GPU and TensorRT" in message
    assert "none (no NVIDIA GPU: nvidia-smi not found; TensorRT: not installed)" in message
    no_trt = HostCapabilities(gpus=(H200,))
    assert "TensorRT: not installed" in (refusal_for(no_trt) or "")
