"""Fail a job whose pool process died mid-job, when Celery redelivers it, not after the sweep.

A crash in native code (TensorRT, CUDA, ONNX Runtime) or the kernel's out-of-memory killer ends
the Celery pool process running a job: no `finally` runs and its heartbeat stops. Celery's main
process sees the pool process lost and, with `task_reject_on_worker_lost`, puts the message back
on the queue. The redelivery cannot claim the job (it is still "running"), so `run_job` asks
here: if the job's recorded worker ("host:pid") is a process on this host that no longer exists,
that process died running it, and the job fails now, saying so (and its scratch folder goes).
Anything less certain (another host, a pid still alive) is left to the stale-job sweep.
"""

import logging
import os
import shutil
import socket
import uuid
from pathlib import Path

from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import Job, JobStatus

__all__ = ["ERROR_CODE", "fail_if_its_process_died"]

logger = logging.getLogger(__name__)

ERROR_CODE = "WorkerProcessDied"


def fail_if_its_process_died(session: Session, job_id: uuid.UUID, scratch_root: Path) -> bool:
    """Fail running job `job_id` if the process that claimed it, on this host, is gone (and
    remove its scratch folder under `scratch_root`)."""
    job = session.get(Job, job_id)
    if job is None or job.status != JobStatus.RUNNING.value or not job.worker:
        return False
    host, _, pid = job.worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
        return False
    message = (
        f"The worker process running job {job_id} ({job.worker}) died in stage "
        f"{job.stage!r} before the job finished: a crash in native code (TensorRT, CUDA or ONNX "
        "Runtime) or the out-of-memory killer. The worker itself carries on and its log says "
        "more. Retry the job, or give it less to do (smaller shapes or profiles, fewer "
        "validation samples)."
    )
    if job_state.fail(session, job_id, ERROR_CODE, message) is None:
        return False
    logger.error("job %s failed: its pool process %s died", job_id, job.worker)
    shutil.rmtree(scratch_root / str(job_id), ignore_errors=True)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
