"""Every database write of one job run, each in a short transaction of its own.

The pipeline, its heartbeat thread and the GPU build relay all go through one `JobRecorder`, so
no transaction stays open across model work and the job's state moves only through
`core.db.job_state`'s guarded updates.
"""

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from core.db import job_state
from core.db.models import Artifact, Job
from core.job_config import JobConfig
from core.storage import StoredObject
from worker.gpu.build_events import Reporter
from worker.pipeline.lost_jobs import fail_if_its_process_died
from worker.pipeline.outcome import benchmark_rows, report_columns, validation_rows
from worker.pipeline.results import JobOutcome

__all__ = ["ClaimedJob", "JobRecorder"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    """What a run needs of the job row it claimed."""

    config: JobConfig
    model_uri: str
    dataset_uri: str | None


class JobRecorder:
    def __init__(self, job_id: uuid.UUID, sessions: sessionmaker[Session]) -> None:
        self.job_id = job_id
        self._sessions = sessions

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def claim(self, worker: str) -> ClaimedJob | None:
        """Mark the job running on `worker`; None if it is no longer queued."""
        with self._transaction() as session:
            job = job_state.claim(session, self.job_id, worker)
            if job is None:
                return None
            return ClaimedJob(
                config=JobConfig.model_validate(job.config),
                model_uri=job.model.storage_uri,
                dataset_uri=job.dataset.storage_uri if job.dataset else None,
            )

    def fail_if_its_process_died(self, scratch_root: Path) -> bool:
        """Fail the job now if the pool process that claimed it on this host is gone
        (see worker/pipeline/lost_jobs.py)."""
        with self._transaction() as session:
            return fail_if_its_process_died(session, self.job_id, scratch_root)

    def start_stage(self, stage: str, progress: float, note: str | None = None) -> bool:
        """Record that the job entered `stage`; False if it no longer runs (cancelled)."""
        with self._transaction() as session:
            return job_state.start_stage(session, self.job_id, stage, progress, note=note)

    def heartbeat(self) -> bool:
        """Show the job's worker is alive; False if the job no longer runs."""
        with self._transaction() as session:
            return job_state.heartbeat(session, self.job_id)

    def event(self, message: str, stage: str) -> None:
        with self._transaction() as session:
            job_state.record_event(session, self.job_id, message, stage=stage)

    def reporter(self, stage: str) -> Reporter:
        """A `Reporter` writing events in `stage`, and progress (or else a heartbeat), in one
        transaction per call; it answers whether the job still runs."""

        def report(messages: Sequence[str], progress: float | None) -> bool:
            with self._transaction() as session:
                if progress is not None:
                    running = job_state.report_progress(session, self.job_id, progress)
                else:
                    running = job_state.heartbeat(session, self.job_id)
                for message in messages:
                    job_state.record_event(session, self.job_id, message, stage=stage)
            return running

        return report

    def succeed(self, outcome: JobOutcome, stored: Sequence[tuple[str, str, StoredObject]]) -> bool:
        """Commit the stored artifacts' rows, the records, the reports and `succeeded` in one
        transaction; False (nothing written) if the job was cancelled meanwhile."""
        with self._transaction() as session:
            session.add_all(
                Artifact(job_id=self.job_id, name=name, kind=kind, uri=obj.uri, sha256=obj.sha256,
                         size_bytes=obj.size_bytes)
                for name, kind, obj in stored
            )
            session.add_all(validation_rows(self.job_id, outcome))
            session.add_all(benchmark_rows(self.job_id, outcome))
            self._attach_reports(session, outcome)
            if job_state.succeed(session, self.job_id) is None:
                session.rollback()
                return False
        return True

    def fail(self, code: str, message: str, outcome: JobOutcome) -> None:
        """Mark the job failed; its validation rows and reports stay with it, since they explain
        an accuracy failure."""
        with self._transaction() as session:
            if job_state.fail(session, self.job_id, code, message) is not None:
                session.add_all(validation_rows(self.job_id, outcome))
                self._attach_reports(session, outcome)

    def _attach_reports(self, session: Session, outcome: JobOutcome) -> None:
        session.execute(update(Job).where(Job.id == self.job_id).values(**report_columns(outcome)))
