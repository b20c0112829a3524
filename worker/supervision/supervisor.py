"""Run each job in a process of its own, and hold it to its limits.

ONNX Runtime cannot be interrupted inside `run`, so a hostile model (an endless `Loop`) would
hold a worker for good, and a crash in native code would take the worker with it. The worker's
pool process therefore claims the job, starts the job's own process
(worker/supervision/job_process.py), forked from a template that has imported the job's code
already (worker/supervision/job_template.py), and watches it:

- at its start and every `POLL_S`: the stage the job's process marks (worker/pipeline/progress.py) and the
  wall-clock time, CPU time and resident memory that stage has used, against its limits
  (`jobs.stage_limits`; time spent waiting for the GPU does not count);
- every `CHECK_S`: the job's row. The supervisor's heartbeat keeps it fresh (the job's process
  may sit inside a native call for hours) and says when the job was cancelled.

When a stage breaks a limit, the job is cancelled, or the job's process dies, the supervisor
kills the process and everything it started within a poll, records what happened (the job
fails naming the stage and the limit, or `WorkerProcessDied`), and removes what the job left:
its scratch folder, and stored artifact files the database never got rows for. The worker then
takes its next job.
"""

import logging
import os
import pickle
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import OperationalError

from core.artifact_refs import ArtifactStoreUnavailable
from core.db.models import JobStatus
from core.db.outage import DatabaseOutage, is_database_outage, outage_text
from core.dispatch import dispatcher_for
from core.isolation import ChildLimits, IsolatedChild
from core.logging_setup import job_context
from core.process_template import TemplateUnavailable
from core.settings import Settings
from core.webhooks.announce import announce_end
from optimizer.errors import OptimizerError
from worker.pipeline.progress import StageMark, read_stage_mark
from worker.pipeline.records.lost_jobs import ERROR_CODE as PROCESS_DIED
from worker.pipeline.records.lost_jobs import LostJob, can_resume_search
from worker.pipeline.records.outcome import attempt_prefix
from worker.pipeline.records.recorder import ClaimedJob, JobRecorder
from worker.pipeline.stages import LOAD
from worker.runtime import WorkerRuntime
from worker.supervision.job_process import JobProcessSpec, run_job_process
from worker.supervision.job_template import job_template

__all__ = ["JobLimitExceeded", "supervise_job", "worker_name"]

logger = logging.getLogger(__name__)

POLL_S = 0.2
CHECK_S = 1.0
_GIB = 2**30
_MIB = 2**20


class JobLimitExceeded(OptimizerError):
    """A stage of the job used more time or memory than its limits allow."""


class _ProcessDied(OptimizerError):
    """The job's process died (a signal) or exited without finishing the job."""


@dataclass(frozen=True)
class _Stop:
    """Why the supervisor stops the job's process: `failure` to record, or None (cancelled)."""

    failure: JobLimitExceeded | None


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def supervise_job(job_id: uuid.UUID, runtime: WorkerRuntime) -> None:
    """Run `job_id` in a process of its own if it is still queued; a redelivered or cancelled
    job is left alone."""
    with job_context(job_id):  # the supervisor's lines carry the job id
        _supervise(job_id, runtime)


def _supervise(job_id: uuid.UUID, runtime: WorkerRuntime) -> None:
    settings = runtime.settings
    # No retries here: the supervisor keeps watching through an outage instead of blocking.
    recorder = JobRecorder(job_id, runtime.sessions)
    claimer = JobRecorder(job_id, runtime.sessions, retry_s=settings.jobs.database_retry_s)
    # How the job ended is recorded however long the database is away (up to a job's longest
    # run): a job must never be left "running" with nothing running it.
    ender = JobRecorder(job_id, runtime.sessions, retry_s=settings.jobs.max_runtime_s)
    claimed = claimer.claim(worker_name())
    if claimed is None:
        lost = recorder.fail_if_its_process_died(settings.scratch_dir)
        if lost is LostJob.REQUEUED:  # a search: this delivery resumes it
            claimed = claimer.claim(worker_name())
        elif lost is LostJob.FAILED:
            _announce_end(runtime, job_id)
            return
        if claimed is None:
            logger.info("job %s is not queued any more; skipping this delivery", job_id)
            return
    # From here on every write of the job holds while this worker holds it (JobRecorder).
    recorder.worker = ender.worker = claimed.worker
    scratch = settings.scratch_dir / str(job_id)
    shutil.rmtree(scratch, ignore_errors=True)  # leftovers of a crashed earlier attempt
    scratch.mkdir(parents=True)
    spec = JobProcessSpec(job_id=job_id, claimed=claimed, settings=settings,
                          capabilities=runtime.capabilities, scratch_dir=scratch,
                          memory_bandwidth_gb_s=runtime.memory_bandwidth_gb_s,
                          stage_file=settings.scratch_dir / f"{job_id}.stage.json")
    temp = scratch / "tmp"  # the job's temporary files go with its scratch, even if it is killed
    temp.mkdir()
    try:
        resumes = 0
        while True:  # more than once only for a search whose process died: it resumes
            with _job_child(spec, temp) as child:
                stop = _watch(child, recorder, settings, spec.stage_file)
                stage = _stage_name(read_stage_mark(spec.stage_file))
                if stop is not None:
                    child.kill()  # before recording, so the job's process writes nothing after
                    if stop.failure is not None:
                        logger.warning("job %s: %s", job_id, stop.failure)
                        ender.fail(type(stop.failure).__name__, str(stop.failure))
                    else:
                        logger.info("job %s was cancelled (or sent to another worker after "
                                    "this one was cut off) in stage %s; its process is stopped",
                                    job_id, stage)
                    return
                resumable = can_resume_search(claimed.config.model_dump(mode="json"), stage,
                                              resumes)
                try:
                    if not _record_exit(child, ender, job_id, stage, resumable=resumable):
                        break
                except DatabaseOutage as outage:
                    _requeue_after_outage(runtime, ender, claimed, stage, outage)
                    break
            resumes += 1
    except OperationalError:
        logger.exception("job %s: the database stayed unavailable past %g s to record how the "
                         "job ended; the stale-job sweep will", job_id,
                         settings.jobs.max_runtime_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        spec.stage_file.unlink(missing_ok=True)
        status = _discard_unrecorded_artifacts(runtime, recorder, job_id, claimed.attempt)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED):  # a cancel is the API's to announce
            _announce_end(runtime, job_id)


def _job_child(spec: JobProcessSpec, temp: Path) -> IsolatedChild:
    """The job's process, forked from the worker's pre-imported template
    (worker/supervision/job_template.py); a fresh interpreter if the template cannot start one."""
    env = {"TMPDIR": str(temp)}
    template = job_template()
    if template is not None:
        try:
            return IsolatedChild(run_job_process, _job_args(spec), env=env, template=template)
        except TemplateUnavailable as err:
            logger.warning("job %s: %s; starting the job's process from a fresh interpreter",
                           spec.job_id, err)
    return IsolatedChild(run_job_process, _job_args(spec), env=env)


def _job_args(spec: JobProcessSpec) -> tuple[tuple[str, ...], bytes]:
    """`run_job_process`'s arguments: the plug-ins to register, then the spec they may name."""
    return spec.settings.plugins, pickle.dumps(spec)


def _announce_end(runtime: WorkerRuntime, job_id: uuid.UUID) -> None:
    """Send the job's webhook task, if it has a callback URL."""
    try:
        with runtime.sessions() as session:
            announce_end(session, dispatcher_for(runtime.settings.resolved_broker_url), job_id)
    except OperationalError:
        logger.exception("job %s: the database was unavailable to announce its end", job_id)


def _watch(child: IsolatedChild, recorder: JobRecorder, settings: Settings,
           stage_file: Path) -> _Stop | None:
    """Watch the job's process until it exits (None) or must be stopped (why)."""
    jobs = settings.jobs
    cpus = os.cpu_count() or 1
    started = time.monotonic()
    mark: StageMark | None = None
    since, cpu_at_start = started, 0.0
    next_check = started
    for _ in _polls(child):
        now = time.monotonic()
        latest = read_stage_mark(stage_file)
        if latest is not None and latest != mark:
            mark, since = latest, latest.since
            cpu_at_start = child.cpu_seconds() or 0.0
        stage = _stage_name(mark)
        limit = jobs.stage_limits.of(stage)
        setting = f"FUSEFORGE_JOBS__STAGE_LIMITS__{stage.upper()}"
        subject = f"Stage {stage!r} of job {recorder.job_id}"
        if mark is None or not mark.waiting:
            wall_s = limit.wall_s or 0.0
            if now - since > wall_s:
                return _Stop(JobLimitExceeded(
                    f"{subject} ran past its wall-clock limit of {wall_s:g} s ({setting}__WALL_S) "
                    "and was stopped. A model that runs this long (an endless Loop, huge shapes) "
                    "needs a higher limit or less work: smaller input shapes, fewer validation "
                    "samples or benchmark iterations."))
            cpu_limit = limit.cpu_s or wall_s * cpus
            used = (child.cpu_seconds() or cpu_at_start) - cpu_at_start
            if used > cpu_limit:
                return _Stop(JobLimitExceeded(
                    f"{subject} used {used:.0f} s of CPU time, over its limit of {cpu_limit:g} s "
                    f"({setting}__CPU_S), and was stopped; raise the limit or give it less work."))
        max_rss = (limit.max_rss_gib or jobs.max_rss_gib) * _GIB
        rss = child.rss_bytes()
        if rss is not None and rss > max_rss:
            return _Stop(JobLimitExceeded(
                f"{subject} used {rss // _MIB} MiB of memory, over its limit of "
                f"{max_rss / _GIB:g} GiB ({setting}__MAX_RSS_GIB or FUSEFORGE_JOBS__MAX_RSS_GIB), "
                "and was stopped; raise the limit or use smaller input shapes."))
        if now - started > jobs.max_runtime_s:
            return _Stop(JobLimitExceeded(
                f"Job {recorder.job_id} ran past its time limit of {jobs.max_runtime_s} s "
                f"(FUSEFORGE_JOBS__MAX_RUNTIME_S) in stage {stage!r} and was stopped."))
        if now >= next_check:
            next_check = now + CHECK_S
            if not _still_running(recorder):
                return _Stop(None)
    return None


def _polls(child: IsolatedChild) -> Iterator[None]:
    """Once at once (a child forked from the template holds the template's imports from its
    first instant, and a stage of a small job can end within one poll), then every POLL_S
    while it runs."""
    yield
    while not child.wait(POLL_S):
        yield


def _still_running(recorder: JobRecorder) -> bool:
    """Touch the job's heartbeat; False once it was cancelled. While the database is away the
    job keeps running (its own writes retry)."""
    try:
        return recorder.heartbeat()
    except OperationalError as err:
        logger.warning("job %s: database unavailable for the heartbeat (%s)", recorder.job_id,
                       type(err.orig).__name__)
        return True


def _record_exit(child: IsolatedChild, recorder: JobRecorder, job_id: uuid.UUID,
                 stage: str, *, resumable: bool) -> bool:
    """The job's process exited by itself: it recorded the outcome, unless it died. Answers
    True when it died `resumable` (a search): the caller starts the job's process again."""
    limits = ChildLimits(timeout_s=1)  # only for the wording of how it died
    try:
        child.outcome(limits, f"The process running job {job_id}", _ProcessDied)
    except DatabaseOutage:
        raise  # not the job's end: the caller queues it again
    except _ProcessDied as died:
        if resumable:
            logger.warning("job %s: its process died in its search (%s); resuming", job_id, died)
            recorder.event(f"the job's process died ({died}); the search resumes at its next "
                           "candidate", stage)
            return True
        message = (f"The process running job {job_id} died in stage {stage!r} before the job "
                   f"finished ({died}). A crash in native code (TensorRT, CUDA or ONNX "
                   "Runtime) or the out-of-memory killer; the worker carries on. Retry the "
                   "job, or give it less to do (smaller shapes or profiles, fewer samples).")
        logger.error("job %s: %s", job_id, message)
        recorder.fail(PROCESS_DIED, message)
    except Exception as err:  # the job's process could not record the outcome itself
        if is_database_outage(err):  # in a write outside the pipeline's own handling
            raise DatabaseOutage(outage_text(err)) from None
        logger.exception("job %s: its process ended with an error", job_id)
        recorder.fail_internally(err)
    return False


# The event a job queued again after a database outage gets; counted to stop at the limit.
_REQUEUED_AFTER_OUTAGE = "queued again after a database outage"
MAX_OUTAGE_REQUEUES = 3


def _requeue_after_outage(runtime: WorkerRuntime, ender: JobRecorder, claimed: ClaimedJob,
                          stage: str, outage: DatabaseOutage) -> None:
    """The job's process gave up on the database in `stage`: once the database answers again
    (`ender` waits for it), queue the job again and send it, so a worker runs it from the
    start; after MAX_OUTAGE_REQUEUES such restarts, fail it as DatabaseUnavailable instead.
    Neither the model's fault nor a bug of ours, and said so."""
    job_id = ender.job_id
    logger.warning("job %s: the database was unavailable in stage %s (%s); waiting for it to "
                   "queue the job again", job_id, stage, outage)
    earlier = ender.count_events(_REQUEUED_AFTER_OUTAGE)
    if earlier >= MAX_OUTAGE_REQUEUES:
        ender.fail("DatabaseUnavailable", (
            f"The database was unavailable while job {job_id} ran (stage {stage!r}: "
            f"{outage}); the job was queued again {earlier} times after such outages and "
            "stops here. Check the database (FUSEFORGE_DATABASE_URL) and run the job again."))
        return
    why = (f"{_REQUEUED_AFTER_OUTAGE} in stage {stage!r} ({outage}): the job starts again from "
           "its first stage")
    if ender.requeue(why):
        dispatcher_for(runtime.settings.resolved_broker_url).send_job(job_id, claimed.config)
        logger.info("job %s: queued again after the database outage", job_id)


def _stage_name(mark: StageMark | None) -> str:
    # Before its first mark the process is starting and loading: held to the load limits.
    return mark.stage if mark is not None else LOAD


def _discard_unrecorded_artifacts(runtime: WorkerRuntime, recorder: JobRecorder,
                                  job_id: uuid.UUID, attempt: int) -> JobStatus | None:
    """Files this attempt stored for a job that did not succeed have no rows (the rows commit
    with `succeeded`): a job killed while storing must not leave them behind. Another attempt's
    files (the job sent again to another worker) are not this one's to touch. Answers the job's
    status (None: unknown, the database is away)."""
    try:
        status = recorder.status()
    except OperationalError:
        return None  # unknown: the janitor's sweep decides later
    if status != JobStatus.SUCCEEDED:
        try:
            runtime.store.delete_prefix(attempt_prefix(job_id, attempt))
        except ArtifactStoreUnavailable as err:
            logger.warning("job %s: its stored files stay until the janitor's sweep: %s",
                           job_id, err)
    return status
