"""Fail a job whose pool process died mid-job, when Celery redelivers it, not after the sweep.

A crash in native code (TensorRT, CUDA, ONNX Runtime) or the kernel's out-of-memory killer ends
the Celery pool process running a job: no `finally` runs and its heartbeat stops. Celery's main
process sees the pool process lost and, with `task_reject_on_worker_lost`, puts the message back
on the queue. The redelivery cannot claim the job (it is still "running"), so `run_job` asks
here: if the job's recorded worker ("host:pid") is a process on this host that no longer exists,
that process died running it, and the job fails now, saying so (and its scratch folder goes).
Anything less certain (another host, a pid still alive) is left to the stale-job sweep.

A search job that died in stage `search` is not failed but put back in the queue, for this
delivery to claim again: its candidates are recorded as they are judged, so the search resumes
at the next one (worker/pipeline/search_stage.py), at most `MAX_SEARCH_RESUMES` times.
"""

import logging
import os
import shutil
import socket
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import Job, JobStatus
from worker.pipeline.stages import SEARCH

__all__ = ["ERROR_CODE", "MAX_SEARCH_RESUMES", "LostJob", "can_resume_search",
           "fail_if_its_process_died"]

logger = logging.getLogger(__name__)

ERROR_CODE = "WorkerProcessDied"
MAX_SEARCH_RESUMES = 3  # a search whose process keeps dying fails after this many resumes


class LostJob(StrEnum):
    FAILED = "failed"
    REQUEUED = "requeued"  # a search job, to resume
    NOT_LOST = "not lost"  # not running here, or its process lives: nothing done


def can_resume_search(config: dict[str, Any], stage: str | None, resumes: int) -> bool:
    """Whether a job whose process died in `stage` resumes instead of failing: a search job,
    in its search, not resumed `MAX_SEARCH_RESUMES` times already."""
    return config.get("search") is not None and stage == SEARCH and resumes < MAX_SEARCH_RESUMES


def fail_if_its_process_died(session: Session, job_id: uuid.UUID, scratch_root: Path) -> LostJob:
    """Fail running job `job_id` if the process that claimed it, on this host, is gone (and
    remove its scratch folder under `scratch_root`); requeue it instead if it is a search."""
    job = session.get(Job, job_id)
    if job is None or job.status != JobStatus.RUNNING.value or not job.worker:
        return LostJob.NOT_LOST
    host, _, pid = job.worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
        return LostJob.NOT_LOST
    if can_resume_search(job.config, job.stage, job.attempts - 1):
        logger.warning("job %s: its pool process %s died in its search; requeued to resume",
                       job_id, job.worker)
        why = (f"the worker process running this search ({job.worker}) died; the search "
               "resumes at its next candidate")
        return LostJob.REQUEUED if job_state.requeue(session, job_id, why) else LostJob.NOT_LOST
    message = (
        f"The worker process running job {job_id} ({job.worker}) died in stage "
        f"{job.stage!r} before the job finished: a crash in native code (TensorRT, CUDA or ONNX "
        "Runtime) or the out-of-memory killer. The worker itself carries on and its log says "
        "more. Retry the job, or give it less to do (smaller shapes or profiles, fewer "
        "validation samples)."
    )
    if job_state.fail(session, job_id, ERROR_CODE, message) is None:
        return LostJob.NOT_LOST
    logger.error("job %s failed: its pool process %s died", job_id, job.worker)
    shutil.rmtree(scratch_root / str(job_id), ignore_errors=True)
    return LostJob.FAILED


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
