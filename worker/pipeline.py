"""Run one job end to end: claim it, run each stage, record the outcome, clean up.

No transaction stays open while a stage works: each state change is its own short transaction.
"""

import logging
import os
import shutil
import socket
import uuid
from pathlib import Path

from api.db import job_state
from api.db.models import Job
from api.db.session import session_scope
from api.settings import get_settings
from api.storage import LocalArtifactStore
from optimizer.errors import EngineBuildError, OptimizerError
from worker.capabilities import detect_worker_capabilities, refusal_for
from worker.context import JobContext
from worker.heartbeat import Heartbeat
from worker.lost_jobs import fail_if_its_process_died
from worker.outcome import record_failure, record_success
from worker.stages import stages_for

__all__ = ["run_job", "worker_name"]

logger = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(job_id: uuid.UUID) -> None:
    """Run `job_id` if it is still queued; a redelivered or cancelled job is left alone."""
    settings = get_settings()
    store = LocalArtifactStore(settings.artifacts_dir)
    with session_scope() as session:
        job = job_state.claim(session, job_id, worker_name())
        if job is None:
            if not fail_if_its_process_died(session, job_id):
                logger.info("job %s is not queued any more; skipping this delivery", job_id)
            return
        ctx = _context_for(job, store, settings.scratch_dir)

    shutil.rmtree(ctx.scratch_dir, ignore_errors=True)  # leftovers of a crashed earlier attempt
    ctx.scratch_dir.mkdir(parents=True)
    try:
        with Heartbeat(job_id, settings.jobs.heartbeat_interval_s) as beat:
            if not _run_stages(ctx, beat):
                logger.info("job %s was cancelled; stopped between stages", job_id)
                return
            with session_scope() as session:
                if not job_state.start_stage(session, job_id, "store", 0.9):
                    return
            record_success(ctx, store)
    except OptimizerError as err:
        logger.info("job %s failed: %s: %s", job_id, type(err).__name__, err)
        record_failure(ctx, type(err).__name__, str(err))
    except Exception as err:
        logger.exception("job %s hit an internal error", job_id)
        record_failure(
            ctx,
            "InternalError",
            f"FuseForge failed internally ({type(err).__name__}: {err}); this is not a fault in "
            f"your model. The worker log has the traceback for job {job_id}.",
        )
    finally:
        shutil.rmtree(ctx.scratch_dir, ignore_errors=True)


def _context_for(job: Job, store: LocalArtifactStore, scratch_root: Path) -> JobContext:
    return JobContext(
        job_id=job.id,
        config=job.config,
        model_path=store.local_path(job.model.storage_uri),
        dataset_path=store.local_path(job.dataset.storage_uri) if job.dataset else None,
        scratch_dir=scratch_root / str(job.id),
    )


def _run_stages(ctx: JobContext, beat: Heartbeat) -> bool:
    """Run every stage; False as soon as the job turns out to be cancelled.

    Raises:
        EngineBuildError: before any work, when this worker cannot build the job's backend
            (a tensorrt job on a worker started with a hand-written queue list).
    """
    why = refusal_for(ctx.config, detect_worker_capabilities())
    if why is not None:
        raise EngineBuildError(why)
    for name, progress, stage in stages_for(ctx.config):
        if not beat.still_running:
            return False
        with session_scope() as session:
            if not job_state.start_stage(session, ctx.job_id, name, progress):
                return False
        stage(ctx)
    return True
