"""Tasks `jobs.run` (optimize one job end to end) and `jobs.sweep_stale` (fail silent jobs)."""

import logging
import uuid
from datetime import timedelta

from api.db import job_state
from api.db.session import session_scope
from api.settings import get_settings
from worker.celery_app import RUN_JOB_TASK, SWEEP_TASK, celery_app
from worker.pipeline import run_job

logger = logging.getLogger(__name__)


@celery_app.task(name=RUN_JOB_TASK, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def run_job_task(job_id: str) -> None:
    run_job(uuid.UUID(job_id))


@celery_app.task(name=SWEEP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_stale_task() -> None:
    stale_after = timedelta(seconds=get_settings().jobs.stale_after_s)
    with session_scope() as session:
        swept = job_state.sweep_stale(session, stale_after)
    if swept:
        logger.warning("failed %d stale job(s): %s", len(swept), ", ".join(map(str, swept)))
