"""Task names and queue routing: pure functions of a job's config and a worker's GPU.

The API uses them to send a job to the right queue (by task name, without loading the worker),
and a worker to choose the queues it consumes. Every queue name comes from the backends' specs
(optimizer/registries/backends.py): each backend's jobs go to its `queue_name` ("cpu" for ONNX
Runtime, "gpu" for TensorRT). A GPU backend's jobs that name a `target_gpu` go to its queue
narrowed to that GPU: "gpu.sm90" (per compute capability) or "gpu.h200" (per GPU model). A
worker asked for a GPU backend's queue also consumes the two narrowed queues of its own GPU, and
only if the host can run that backend: a host that cannot drops them, so those jobs wait for
one that can instead of failing here. Each GPU backend is fitted on its own.
"""

from collections.abc import Iterable, Iterator

from core.job_config import JobConfig
from optimizer.capabilities import (
    GpuInfo,
    HostCapabilities,
    gpu_name_slug,
    normalize_compute_capability,
    sm_tag,
)
from optimizer.registries.backends import BACKENDS, BackendSpec, QueueKind

__all__ = [
    "CPU_QUEUE",
    "DELIVER_WEBHOOK_TASK",
    "GPU_QUEUE",
    "RUN_JOB_TASK",
    "WEBHOOK_QUEUE",
    "backend_queues",
    "can_take_gpu_jobs",
    "cpu_queues",
    "gpu_backend_of",
    "gpu_queues",
    "is_gpu_queue",
    "job_queue",
    "narrowed_queue",
    "queue_backend",
    "queue_for",
    "worker_queues",
]

RUN_JOB_TASK = "jobs.run"
DELIVER_WEBHOOK_TASK = "webhooks.deliver"
# Every worker consumes it besides its own queues, so webhooks go out whichever workers run.
WEBHOOK_QUEUE = "webhooks"


def _first_queue_of(kind: QueueKind) -> str:
    return next(spec.queue_name for spec in BACKENDS.values() if spec.queue is kind)


# The first declared backend's queue of each kind ("cpu", "gpu"): where a task sent without a
# queue goes, and the names a worker started without --queues consumes.
CPU_QUEUE = _first_queue_of(QueueKind.CPU)
GPU_QUEUE = _first_queue_of(QueueKind.GPU)


def backend_queues() -> list[str]:
    """Every backend's queue, once each, in the registry's order (no narrowed ones)."""
    return list(dict.fromkeys(spec.queue_name for spec in BACKENDS.values()))


def cpu_queues() -> list[str]:
    """Every CPU backend's queue, once each ("cpu", "openvino"): what a worker started without
    --queues consumes (each it cannot run is dropped, `worker_queues`)."""
    return list(dict.fromkeys(spec.queue_name for spec in BACKENDS.values()
                              if spec.queue is QueueKind.CPU))


def queue_backend(name: str) -> BackendSpec | None:
    """The backend whose own queue (or a narrowed form of it) `name` is, where only that
    backend's jobs go there; None for a shared or unknown queue."""
    owners = [spec for spec in BACKENDS.values() if _in_family(name, spec.queue_name)]
    return owners[0] if len(owners) == 1 else None


def _spec_named(backend: str) -> BackendSpec:
    for spec in BACKENDS.values():
        if spec.name == backend:
            return spec
    known = ", ".join(repr(str(name)) for name in BACKENDS)
    raise ValueError(f"no backend {backend!r} has a queue; the backends are {known}")


def _gpu_backends() -> Iterator[BackendSpec]:
    return (spec for spec in BACKENDS.values() if spec.queue is QueueKind.GPU)


def _in_family(name: str, queue: str) -> bool:
    """Whether `name` is `queue` or one of its narrowed forms ("gpu", "gpu.sm90" of "gpu")."""
    return name == queue or name.startswith(f"{queue}.")


def narrowed_queue(queue: str, target_gpu: str) -> str:
    """("gpu", "9.0" or "sm_90") → "gpu.sm90"; ("gpu", "H200" or "NVIDIA H200") → "gpu.h200"."""
    compute_capability = normalize_compute_capability(target_gpu)
    if compute_capability is not None:
        return f"{queue}.{sm_tag(compute_capability)}"
    return f"{queue}.{gpu_name_slug(target_gpu)}"


def job_queue(config: JobConfig) -> str:
    """The queue a job's config sends it to: its backend's, narrowed by `target_gpu` if set."""
    return queue_for(config.backend, config.target_gpu)


def queue_for(backend: str, target_gpu: str | None) -> str:
    """job_queue() of a config with this backend and target_gpu (a stored job's, unparsed)."""
    spec = _spec_named(backend)
    if spec.needs_gpu and target_gpu:
        return narrowed_queue(spec.queue_name, target_gpu)
    return spec.queue_name


def gpu_queues(gpu: GpuInfo, queue: str) -> list[str]:
    """The queues of GPU backend queue `queue` a worker building on `gpu` consumes: any-GPU,
    its compute capability's, its model's."""
    queues = [queue]
    if gpu.compute_capability is not None:
        queues.append(narrowed_queue(queue, gpu.compute_capability))
    queues.append(f"{queue}.{gpu_name_slug(gpu.name)}")
    return queues


def gpu_backend_of(name: str) -> BackendSpec | None:
    """The GPU backend whose queue (or a narrowed form of it) `name` is; None for any other."""
    return next((spec for spec in _gpu_backends() if _in_family(name, spec.queue_name)), None)


def is_gpu_queue(name: str) -> bool:
    return gpu_backend_of(name) is not None


def _runs_here(spec: BackendSpec, capabilities: HostCapabilities) -> bool:
    # A GPU backend's narrowed queues are its GPU's: without one it has nothing to build on.
    return capabilities.gpu is not None and spec.runs_on(capabilities)


def can_take_gpu_jobs(capabilities: HostCapabilities, requested: Iterable[str] | None = None) -> bool:
    """Whether a host can run the jobs of some GPU backend (TensorRT: a GPU and TensorRT); with
    `requested`, of some GPU backend one of those queues belongs to."""
    wanted = None if requested is None else {
        spec.name for spec in map(gpu_backend_of, requested) if spec is not None}
    return any(_runs_here(spec, capabilities) for spec in _gpu_backends()
               if wanted is None or spec.name in wanted)


def worker_queues(requested: Iterable[str], capabilities: HostCapabilities) -> tuple[list[str], list[str]]:
    """(queues to add, queues to drop) for a worker asked to consume `requested`.

    A CPU backend's own queue is dropped where the host cannot run that backend (no OpenVINO).
    Asking for any queue of a GPU backend means "take that backend's jobs this host can build":
    a host that runs it adds its GPU's narrowed queues of that backend; one that cannot drops
    every queue of that backend, so those jobs stay queued for a worker that can build them
    instead of failing here. Each GPU backend is decided alone; other queues are left as asked.
    """
    requested = list(requested)
    gpu = capabilities.gpu
    add: list[str] = []
    # A CPU backend with a queue of its own (OpenVINO's) is taken only where the host runs it.
    drop: list[str] = [name for name in requested
                       if (spec := queue_backend(name)) is not None
                       and spec.queue is QueueKind.CPU and not spec.runs_on(capabilities)]
    for spec in _gpu_backends():
        asked = [name for name in requested if _in_family(name, spec.queue_name)]
        if not asked:
            continue
        if gpu is None or not _runs_here(spec, capabilities):
            drop.extend(asked)
            continue
        add.extend(name for name in gpu_queues(gpu, spec.queue_name)
                   if name not in requested and name not in add)
    return add, drop
