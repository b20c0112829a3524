"""The Celery application. The API imports it to send tasks by name; only workers load the tasks.

Queues: "cpu" for CPU backends; "gpu" for TensorRT jobs any GPU worker may build; "gpu.sm90"
(per compute capability) and "gpu.h200" (per GPU model) for jobs that name a `target_gpu`. A
worker started on "gpu" also consumes the two queues of its own GPU, and records what it has
(GPU, TensorRT) with a heartbeat in the `workers` table, so the API can tell whether any online
worker consumes a job's queue.
"""

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown

from api.settings import get_settings
from optimizer.capabilities import (
    GpuInfo,
    HostCapabilities,
    gpu_name_slug,
    normalize_compute_capability,
    sm_tag,
)

__all__ = [
    "CPU_QUEUE",
    "GPU_QUEUE",
    "JOB_QUEUE_BY_BACKEND",
    "RUN_JOB_TASK",
    "SWEEP_TASK",
    "celery_app",
    "gpu_queues",
    "job_queue",
    "worker_queues",
]

logger = logging.getLogger(__name__)

RUN_JOB_TASK = "jobs.run"
SWEEP_TASK = "jobs.sweep_stale"
CPU_QUEUE = "cpu"
GPU_QUEUE = "gpu"
# CPU backends run on CPU workers; TensorRT jobs on GPU workers.
JOB_QUEUE_BY_BACKEND = {"onnxruntime": CPU_QUEUE, "tensorrt": GPU_QUEUE}


def gpu_queue_for_target(target_gpu: str) -> str:
    """ "9.0" or "sm_90" → "gpu.sm90"; a GPU name ("H200", "NVIDIA H200") → "gpu.h200"."""
    compute_capability = normalize_compute_capability(target_gpu)
    if compute_capability is not None:
        return f"{GPU_QUEUE}.{sm_tag(compute_capability)}"
    return f"{GPU_QUEUE}.{gpu_name_slug(target_gpu)}"


def job_queue(config: Mapping[str, Any]) -> str:
    """The queue a job's config sends it to: its backend's, narrowed by `target_gpu` if set."""
    queue = JOB_QUEUE_BY_BACKEND[config["backend"]]
    target = config.get("target_gpu")
    if queue == GPU_QUEUE and target:
        return gpu_queue_for_target(target)
    return queue


def gpu_queues(gpu: GpuInfo) -> list[str]:
    """The queues a worker building on `gpu` consumes: any-GPU, its compute capability, its model."""
    queues = [GPU_QUEUE]
    if gpu.compute_capability is not None:
        queues.append(gpu_queue_for_target(gpu.compute_capability))
    queues.append(f"{GPU_QUEUE}.{gpu_name_slug(gpu.name)}")
    return queues


def _is_gpu_queue(name: str) -> bool:
    return name == GPU_QUEUE or name.startswith(f"{GPU_QUEUE}.")


def worker_queues(requested: Iterable[str], capabilities: HostCapabilities) -> tuple[list[str], list[str]]:
    """(queues to add, queues to drop) for a worker asked to consume `requested`.

    Asking for any GPU queue means "take the TensorRT jobs this host can build": a host that can
    (a GPU and TensorRT) adds its GPU's queues; one that cannot drops every GPU queue, so those
    jobs stay queued for a worker that can build them instead of failing here.
    """
    requested = list(requested)
    asked = [q for q in requested if _is_gpu_queue(q)]
    if not asked:
        return [], []
    if capabilities.gpu is None or not capabilities.can_build_tensorrt:
        return [], asked
    return [q for q in gpu_queues(capabilities.gpu) if q not in requested], []


def _make_celery_app() -> Celery:
    settings = get_settings()
    app = Celery("fuseforge", broker=settings.resolved_broker_url, include=["worker.tasks.run_job"])
    app.conf.update(
        task_acks_late=True,  # a message is acked only after the job ran; claim() makes reruns safe
        task_reject_on_worker_lost=True,
        task_ignore_result=True,  # job state lives in the database, never in a result backend
        worker_prefetch_multiplier=1,
        task_default_queue=CPU_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule_filename=str(settings.data_dir / "celerybeat-schedule"),
        beat_schedule={
            "sweep-stale-jobs": {
                "task": SWEEP_TASK,
                "schedule": timedelta(seconds=settings.jobs.heartbeat_interval_s * 2),
                "options": {"queue": CPU_QUEUE},
            }
        },
    )
    if app.conf.broker_url.startswith(("redis://", "rediss://")):
        # Redis re-sends an unacked message after this; a job may legitimately run this long.
        app.conf.broker_transport_options = {"visibility_timeout": settings.jobs.max_runtime_s + 600}
    return app


celery_app = _make_celery_app()


# Worker start-up and shutdown. The handlers import worker.capabilities lazily: the API imports
# this module too, and these signals fire only in a worker's main process.
def _choose_queues(sender: str, instance: Any, **_: Any) -> None:
    """Detect the host's capabilities once, and fit the GPU queues to them (before consuming)."""
    from worker.capabilities import detect_worker_capabilities

    capabilities = detect_worker_capabilities()
    queues = instance.app.amqp.queues
    add, drop = worker_queues(queues.consume_from.keys(), capabilities)
    for name in add:
        queues.select_add(name)
    for name in drop:
        queues.deselect(name)
    if drop:
        logger.error(
            "worker %s will not consume %s: it cannot build TensorRT engines (%s). TensorRT jobs "
            "stay queued for a worker that can.",
            sender, ", ".join(drop), capabilities.describe(),
        )
    logger.info(
        "worker %s capabilities: %s; queues: %s",
        sender, capabilities.describe(), ", ".join(sorted(queues.consume_from)),
    )


def _start_heartbeat(sender: Any, **_: Any) -> None:
    """Record the worker in the `workers` table and keep its heartbeat fresh (main process only)."""
    from worker.capabilities import start_worker_heartbeat

    start_worker_heartbeat(sender.hostname, sorted(sender.app.amqp.queues.consume_from))


def _stop_heartbeat(**_: Any) -> None:
    from worker.capabilities import stop_worker_heartbeat

    stop_worker_heartbeat()


celeryd_after_setup.connect(_choose_queues)
worker_ready.connect(_start_heartbeat)
worker_shutdown.connect(_stop_heartbeat)
