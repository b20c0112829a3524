"""Tasks `jobs.run` (optimize one job end to end) and `jobs.sweep_stale` (fail silent jobs)."""

import logging
import uuid
from datetime import timedelta

from core.db import job_state
from core.queues import RUN_JOB_TASK, SWEEP_TASK
from worker.celery_app import celery_app
from worker.pipeline.run import run_job
from worker.runtime import current_runtime

logger = logging.getLogger(__name__)


@celery_app.task(name=RUN_JOB_TASK, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def run_job_task(job_id: str) -> None:
    run_job(uuid.UUID(job_id), current_runtime())


@celery_app.task(name=SWEEP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_stale_task() -> None:
    runtime = current_runtime()
    stale_after = timedelta(seconds=runtime.settings.jobs.stale_after_s)
    with runtime.sessions() as session, session.begin():
        swept = job_state.sweep_stale(session, stale_after)
    if swept:
        logger.warning("failed %d stale job(s): %s", len(swept), ", ".join(map(str, swept)))
