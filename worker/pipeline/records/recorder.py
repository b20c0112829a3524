"""Every database write of one job run, each in a short transaction of its own.

The supervisor's heartbeat, the pipeline and the GPU build relay all go through one `JobRecorder`, so
no transaction stays open across model work and the job's state moves only through
`core.db.job_state`'s guarded updates.
"""

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from core.db import job_state, search_candidates
from core.db.models import Artifact, Dataset, Job, JobStatus
from core.job_config import JobConfig
from core.storage import StoredObject
from optimizer.errors import InternalError
from worker.gpu.build_events import Reporter
from worker.pipeline.records.benchmark_context import fill_context
from worker.pipeline.records.benchmark_keys import set_config_keys
from worker.pipeline.records.lost_jobs import LostJob, fail_if_its_process_died
from worker.pipeline.records.outcome import (
    benchmark_rows,
    failed_outcome_column,
    outcome_column,
    report_columns,
    validation_rows,
)
from worker.pipeline.records.regression import flag_regression
from worker.pipeline.results import JobOutcome

__all__ = ["INTERNAL_ERROR", "ClaimedJob", "JobRecorder"]

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "InternalError"  # the error code of a job failed by a fault of ours

T = TypeVar("T")
_FIRST_PAUSE_S = 0.5
_LONGEST_PAUSE_S = 5.0


@dataclass(frozen=True)
class ClaimedJob:
    """What a run needs of the job row it claimed."""

    config: JobConfig
    model_uri: str
    dataset_uri: str | None
    worker: str | None = None  # who claimed it: the worker's "host:pid"
    attempt: int = 1  # which claim of the job this is (its artifacts are stored apart)
    calibration_uri: str | None = None  # an int8 job's calibration dataset (.npz)
    project_id: uuid.UUID | None = None
    model_id: uuid.UUID | None = None
    calibration_id: uuid.UUID | None = None
    # the model's .onnx file inside its stored tar, when it came with its data files
    # (Model.external_data); None: `model_uri` is the .onnx file itself
    model_file: str | None = None
    model_name: str | None = None  # the name the model was uploaded with (Model.name)


class JobRecorder:
    """`retry_s`: how long a write retries through a database outage (connection errors) before
    its error reaches the caller; each retry runs the whole transaction again.

    `worker`: the worker that claimed the job (set by `claim`). A recorder with one moves the
    job (stages, progress, heartbeats, its end) only while that worker still holds it: a worker
    cut off long enough for the janitor to send its job to another one writes nothing of it
    when it comes back, and stops as if the job were cancelled."""

    def __init__(self, job_id: uuid.UUID, sessions: sessionmaker[Session], *,
                 retry_s: float = 0.0, worker: str | None = None) -> None:
        self.job_id = job_id
        self.worker = worker
        self._sessions = sessions
        self._retry_s = retry_s

    def _write(self, work: Callable[[Session], T]) -> T:
        """`work` in a transaction of its own, committed; retried while the database is away."""
        deadline = time.monotonic() + self._retry_s
        pause = _FIRST_PAUSE_S
        while True:
            try:
                with self._sessions() as session, session.begin():
                    return work(session)
            except OperationalError as err:
                if time.monotonic() + pause > deadline:
                    raise
                logger.warning("job %s: database unavailable (%s); retrying in %.1f s",
                               self.job_id, type(err.orig).__name__, pause)
                time.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)

    def claim(self, worker: str) -> ClaimedJob | None:
        """Mark the job running on `worker`; None if it is no longer queued."""

        def claim(session: Session) -> ClaimedJob | None:
            job = job_state.claim(session, self.job_id, worker)
            if job is None:
                return None
            self.worker = worker
            return ClaimedJob(
                attempt=job.attempts,
                config=JobConfig.model_validate(job.config),
                model_uri=job.model.storage_uri,
                dataset_uri=job.dataset.storage_uri if job.dataset else None,
                worker=worker,
                calibration_uri=_calibration_uri(session, job),
                project_id=job.project_id, model_id=job.model_id,
                calibration_id=_calibration_id(job),
                model_file=(job.model.external_data or {}).get("model_file"),
                model_name=job.model.name,
            )

        return self._write(claim)

    def fail_if_its_process_died(self, scratch_root: Path) -> LostJob:
        """Fail the job now if the pool process that claimed it on this host is gone, or
        requeue it if it is a search (see worker/pipeline/records/lost_jobs.py)."""
        return self._write(lambda session: fail_if_its_process_died(session, self.job_id,
                                                                     scratch_root))

    def start_stage(self, stage: str, progress: float, note: str | None = None) -> bool:
        """Record that the job entered `stage`; False if it no longer runs (cancelled)."""
        return self._write(lambda session: job_state.start_stage(session, self.job_id, stage,
                                                                 progress, note=note,
                                                                 owner=self.worker))

    def heartbeat(self) -> bool:
        """Show the job's worker is alive; False if the job no longer runs."""
        return self._write(lambda session: job_state.heartbeat(session, self.job_id,
                                                               owner=self.worker))

    def event(self, message: str, stage: str) -> None:
        self._write(lambda session: job_state.record_event(session, self.job_id, message,
                                                           stage=stage))

    def reporter(self, stage: str) -> Reporter:
        """A `Reporter` writing events in `stage`, and progress (or else a heartbeat), in one
        transaction per call; it answers whether the job still runs."""

        def report(messages: Sequence[str], progress: float | None) -> bool:
            def write(session: Session) -> bool:
                if progress is not None:
                    running = job_state.report_progress(session, self.job_id, progress,
                                                        owner=self.worker)
                else:
                    running = job_state.heartbeat(session, self.job_id, owner=self.worker)
                for message in messages:
                    job_state.record_event(session, self.job_id, message, stage=stage)
                return running

            return self._write(write)

        return report

    def search_candidates(self) -> list[dict[str, Any]]:
        """The candidates this search job recorded before (a resumed search reads them)."""
        return self._write(lambda session: [
            {"name": row.name, "outcome": row.outcome, "reason": row.reason,
             "recipe": row.recipe, "accuracy": row.accuracy or {},
             "engine_bytes": row.engine_bytes, "build_s": row.build_s}
            for row in search_candidates.candidates_of(session, self.job_id)])

    def record_search_candidate(self, name: str, **values: Any) -> None:
        """Record search candidate `name` as it is now (columns of core/db/models.py's
        SearchCandidate), in a transaction of its own."""
        self._write(lambda session: search_candidates.record_candidate(
            session, self.job_id, name, **values))

    def succeed(self, outcome: JobOutcome, stored: Sequence[tuple[str, str, StoredObject]]) -> bool:
        """Commit the stored artifacts' rows, the records (keyed, the engine's judged for a
        regression: worker/pipeline/records/regression.py), the reports and `succeeded` in one
        transaction; False (nothing written) if the job was cancelled meanwhile."""

        def succeed(session: Session) -> bool:
            session.add_all(
                Artifact(job_id=self.job_id, name=name, kind=kind, uri=obj.uri,
                         sha256=obj.sha256, size_bytes=obj.size_bytes)
                for name, kind, obj in stored
            )
            session.add_all(validation_rows(self.job_id, outcome))
            # with their environment, keyed by what shipped, and judged against the model's
            # earlier engines (same shipped configuration and environment) before they are added
            records = fill_context(benchmark_rows(self.job_id, outcome), outcome.benchmark_context)
            columns = report_columns(outcome)
            set_config_keys(session, self.job_id, records, columns)
            if outcome.original_shipped is None:  # the user's own model is no regression
                flag_regression(session, self.job_id, records)
            session.add_all(records)
            session.execute(update(Job).where(Job.id == self.job_id).values(**columns))
            job = job_state.succeed(session, self.job_id, owner=self.worker)
            if job is None:
                session.rollback()
                return False
            job.outcome = outcome_column(job.config, outcome, columns)
            return True

        return self._write(succeed)

    def fail(self, code: str, message: str, outcome: JobOutcome | None = None) -> bool:
        """Mark the job failed; its validation rows and reports stay with it, since they explain
        an accuracy failure. False if it had already ended (e.g. cancelled)."""

        def fail(session: Session) -> bool:
            if job_state.fail(session, self.job_id, code, message, owner=self.worker) is None:
                return False
            if outcome is not None:
                session.add_all(validation_rows(self.job_id, outcome))
                self._attach_reports(session, outcome)
                if outcome.validation is not None:  # the outcome names the verdict's worst
                    job = session.get_one(Job, self.job_id)
                    job.outcome = failed_outcome_column(job.config, code, message, outcome)
            return True

        return self._write(fail)

    def fail_internally(self, err: BaseException, outcome: JobOutcome | None = None) -> bool:
        """Mark the job failed by a fault of ours (`err`, whose traceback the caller logged),
        telling the user it is not their model's; as `fail`."""
        return self.fail(INTERNAL_ERROR,
                         f"FuseForge failed internally ({type(err).__name__}: {err}); this is not "
                         f"a fault in your model. The worker log has the traceback for job "
                         f"{self.job_id}.", outcome)

    def requeue(self, why: str) -> bool:
        """Put the running job back in the queue, recording `why`; False if it no longer runs."""
        return self._write(lambda session: job_state.requeue(session, self.job_id, why,
                                                             owner=self.worker) is not None)

    def count_events(self, prefix: str) -> int:
        """How many of the job's events start with `prefix`."""
        return self._write(lambda session: job_state.count_events(session, self.job_id, prefix))

    def status(self) -> JobStatus | None:
        """The job's status now."""
        return self._write(lambda session: job_state.status_of(session, self.job_id))

    def _attach_reports(self, session: Session, outcome: JobOutcome) -> None:
        session.execute(update(Job).where(Job.id == self.job_id).values(**report_columns(outcome)))


def _calibration_id(job: Job) -> uuid.UUID | None:
    calibration = (job.config.get("quantization") or {}).get("calibration")
    return None if calibration is None else uuid.UUID(calibration)


def _calibration_uri(session: Session, job: Job) -> str | None:
    """Where an int8 job's calibration dataset is stored; None without one. A dataset the
    job names cannot go while it is queued or running (api/services/deletions.py)."""
    calibration = _calibration_id(job)
    if calibration is None:
        return None
    dataset = session.get(Dataset, calibration)
    if dataset is None:
        raise InternalError(f"job {job.id}: its calibration dataset {calibration} is gone")
    return dataset.storage_uri
