"""Task `jobs.run`: optimize one job end to end (in a process of its own, supervised)."""

import logging
import uuid

from core.queues import RUN_JOB_TASK
from worker.celery_app import celery_app
from worker.runtime import current_runtime
from worker.supervision.supervisor import supervise_job

logger = logging.getLogger(__name__)


@celery_app.task(name=RUN_JOB_TASK, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def run_job_task(job_id: str) -> None:
    supervise_job(uuid.UUID(job_id), current_runtime())
