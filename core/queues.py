"""Task names and queue routing: pure functions of a job's config and a worker's GPU.

The API uses them to send a job to the right queue (by task name, without loading the worker),
and a worker to choose the queues it consumes. Queues: "cpu" for CPU backends; "gpu" for TensorRT
jobs any GPU worker may build; "gpu.sm90" (per compute capability) and "gpu.h200" (per GPU model)
for jobs that name a `target_gpu`. A worker started on "gpu" also consumes the two queues of its
own GPU.
"""

from collections.abc import Iterable

from core.job_config import JobConfig
from optimizer.capabilities import (
    GpuInfo,
    HostCapabilities,
    gpu_name_slug,
    normalize_compute_capability,
    sm_tag,
)

__all__ = [
    "CPU_QUEUE",
    "DELIVER_WEBHOOK_TASK",
    "GPU_QUEUE",
    "JOB_QUEUE_BY_BACKEND",
    "RUN_JOB_TASK",
    "WEBHOOK_QUEUE",
    "gpu_queue_for_target",
    "gpu_queues",
    "is_gpu_queue",
    "job_queue",
    "queue_for",
    "worker_queues",
]

RUN_JOB_TASK = "jobs.run"
DELIVER_WEBHOOK_TASK = "webhooks.deliver"
CPU_QUEUE = "cpu"
GPU_QUEUE = "gpu"
# Every worker consumes it besides its own queues, so webhooks go out whichever workers run.
WEBHOOK_QUEUE = "webhooks"
# CPU backends run on CPU workers; TensorRT jobs on GPU workers.
JOB_QUEUE_BY_BACKEND = {"onnxruntime": CPU_QUEUE, "tensorrt": GPU_QUEUE}


def gpu_queue_for_target(target_gpu: str) -> str:
    """ "9.0" or "sm_90" → "gpu.sm90"; a GPU name ("H200", "NVIDIA H200") → "gpu.h200"."""
    compute_capability = normalize_compute_capability(target_gpu)
    if compute_capability is not None:
        return f"{GPU_QUEUE}.{sm_tag(compute_capability)}"
    return f"{GPU_QUEUE}.{gpu_name_slug(target_gpu)}"


def job_queue(config: JobConfig) -> str:
    """The queue a job's config sends it to: its backend's, narrowed by `target_gpu` if set."""
    return queue_for(config.backend, config.target_gpu)


def queue_for(backend: str, target_gpu: str | None) -> str:
    """job_queue() of a config with this backend and target_gpu (a stored job's, unparsed)."""
    queue = JOB_QUEUE_BY_BACKEND[backend]
    if queue == GPU_QUEUE and target_gpu:
        return gpu_queue_for_target(target_gpu)
    return queue


def gpu_queues(gpu: GpuInfo) -> list[str]:
    """The queues a worker building on `gpu` consumes: any-GPU, its compute capability, its model."""
    queues = [GPU_QUEUE]
    if gpu.compute_capability is not None:
        queues.append(gpu_queue_for_target(gpu.compute_capability))
    queues.append(f"{GPU_QUEUE}.{gpu_name_slug(gpu.name)}")
    return queues


def is_gpu_queue(name: str) -> bool:
    return name == GPU_QUEUE or name.startswith(f"{GPU_QUEUE}.")


def worker_queues(requested: Iterable[str], capabilities: HostCapabilities) -> tuple[list[str], list[str]]:
    """(queues to add, queues to drop) for a worker asked to consume `requested`.

    Asking for any GPU queue means "take the TensorRT jobs this host can build": a host that can
    (a GPU and TensorRT) adds its GPU's queues; one that cannot drops every GPU queue, so those
    jobs stay queued for a worker that can build them instead of failing here.
    """
    requested = list(requested)
    asked = [q for q in requested if is_gpu_queue(q)]
    if not asked:
        return [], []
    if capabilities.gpu is None or not capabilities.can_build_tensorrt:
        return [], asked
    return [q for q in gpu_queues(capabilities.gpu) if q not in requested], []
