"""Retention: remove what has been kept longer than FUSEFORGE_RETENTION__* allows.

The janitor runs these in its slower round (worker/janitor.py). Only finished jobs are looked
at: a queued or running job's files and events are never touched.

- `expire_artifacts`: the artifacts of jobs that finished before a time are marked expired
  (the rows stay, so the job still lists them and a download answers 410 Gone), and after that
  commits their files are removed. A file that fails to go is removed by the janitor's
  leftover sweep, which keeps only the files of jobs with unexpired artifact rows.
- `delete_old_events`: the events of finished jobs written before a time are deleted.
"""

import logging
import uuid
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import Artifact, Job, JobEvent, JobStatus
from core.db.types import utc_now
from core.storage import ArtifactStore

__all__ = ["delete_old_events", "expire_artifacts"]

logger = logging.getLogger(__name__)

_FINAL = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)
_BATCH_JOBS = 500  # jobs expired per transaction: short transactions, bounded IN lists


def expire_artifacts(sessions: sessionmaker[Session], store: ArtifactStore, *,
                     finished_before: datetime) -> list[uuid.UUID]:
    """Expire the artifacts of jobs that finished before `finished_before` and remove their
    files; the ids of the jobs whose artifacts expired now."""
    ended_at = func.coalesce(Job.finished_at, Job.created_at)
    expired: list[uuid.UUID] = []
    while True:
        with sessions() as session, session.begin():
            job_ids = list(session.scalars(
                select(Artifact.job_id).join(Job, Job.id == Artifact.job_id)
                .where(Artifact.expired_at.is_(None), Job.status.in_(_FINAL),
                       ended_at < finished_before)
                .distinct().limit(_BATCH_JOBS)))
            if job_ids:
                session.execute(
                    update(Artifact)
                    .where(Artifact.job_id.in_(job_ids), Artifact.expired_at.is_(None))
                    .values(expired_at=utc_now())
                    .execution_options(synchronize_session=False))
        for job_id in job_ids:  # after the commit: a row never names a file already gone
            try:
                store.delete_prefix(f"jobs/{job_id}/")
            except OSError as err:
                logger.warning("could not remove the expired artifacts of job %s (%s); the "
                               "leftover sweep will", job_id, err)
        expired += job_ids
        if len(job_ids) < _BATCH_JOBS:
            return expired


def delete_old_events(sessions: sessionmaker[Session], *, created_before: datetime) -> int:
    """Delete the events of finished jobs written before `created_before`; how many went."""
    finished = select(Job.id).where(Job.status.in_(_FINAL))
    with sessions() as session, session.begin():
        result = session.execute(
            delete(JobEvent)
            .where(JobEvent.created_at < created_before, JobEvent.job_id.in_(finished))
            .execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)
