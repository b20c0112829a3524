"""The janitor: a process of its own that keeps jobs and files honest, whatever the workers do.

`python -m worker.janitor` (`fuseforge janitor`; `make run` and docker compose start one) runs,
every `janitor.interval_s`:

- **stale jobs**: running jobs whose supervisor stopped touching their heartbeat for
  `jobs.stale_after_s` (its worker died, or its host was lost) are requeued and sent again to
  the next worker, `jobs.lost_worker_resends` times (it starts over; a search job stale in
  its search resumes at its next candidate, at most three times); after that they fail as
  WorkerLost and their webhooks go. It runs apart from the workers, so liveness never waits
  behind a job or on a worker that is gone. After a database outage it waits a full
  `stale_after_s` before judging, since no heartbeat could be written meanwhile.
- **lost messages**: the database is the source of truth; a job queued for
  `janitor.requeue_after_s` whose `jobs.run` message the broker no longer holds (e.g. a message
  acked while the database was down) is sent again; so is one whose message a worker took
  `janitor.unclaimed_after_s` ago without claiming the job (it died first: Redis gives such a
  message back only after its visibility timeout), at most once in that time. A duplicate is
  harmless: `claim` is guarded.
  Likewise a finished job's webhook that was never attempted, or whose retry never came
  (`janitor.webhook_resend_after_s` overdue, core/webhooks/overdue.py), and whose
  `webhooks.deliver` message the broker no longer holds. A webhook delivered (or given up) is
  never sent again.
- **files a crash left** (each removal logged): scratch folders and stage marks of jobs that
  no longer run; stored
  artifact files with no row (a job killed while storing; rows commit with `succeeded`; a
  deleted job, or expired artifacts, whose files failed to go); upload temporary files
  untouched for `janitor.upload_stale_s` (an API killed mid-upload); likewise a model upload's
  write into the store (an S3 multipart upload, a hidden local partial file) that no byte
  reached for `janitor.upload_stale_s` (its API process died mid-upload).
- **expired idempotency keys**: rows of `idempotency_keys` past their expiry (an answer older
  than `idempotency.ttl_s`, or the lease of a request whose API process died).

Every `janitor.sweep_interval_s`, a slower round:

- **retention** (worker/retention.py): the artifact files of jobs finished more than
  `retention.artifacts_days` ago (their rows stay, marked expired), and events of finished jobs
  older than `retention.events_days`. Unset: kept for ever.
- **stored uploads no row names** (a deleted model or dataset whose file failed to go),
  untouched for `janitor.upload_stale_s`: an upload moves its file in moments before its row
  commits, after a model check of at most `model_check.timeout_s`.

Run one janitor per deployment (several are harmless, only wasteful); it needs the database,
the broker and the data folder the workers and the API use.
"""

import logging
import shutil
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from core.db import idempotency_keys, job_state, resumable_uploads
from core.db.models import (
    Artifact,
    Dataset,
    Job,
    JobEvent,
    JobStatus,
    Model,
    ResumableUpload,
)
from core.db.session import make_engine
from core.db.types import utc_now
from core.dispatch import JobDispatcher
from core.invalid_settings import exit_on_invalid_settings
from core.job_config import JobConfig
from core.logging_setup import configure_logging
from core.queues import job_queue
from core.settings import Settings, get_settings
from core.storage import ArtifactStore, artifact_store
from core.webhooks.announce import announce_end
from core.webhooks.overdue import overdue_deliveries
from worker.pipeline.records.lost_jobs import can_resume_search
from worker.retention import delete_old_events, expire_artifacts

__all__ = ["Janitor", "main"]

_RESENT = "re-sent to queue"  # how a re-sent job's event starts

logger = logging.getLogger(__name__)

_STAGE_MARK_SUFFIX = ".stage.json"  # worker/supervision/supervisor.py's per-job stage marks
# Store folders of uploads, and the rows that name their files.
_UPLOAD_FOLDERS: dict[str, type[Model | Dataset]] = {"models": Model, "datasets": Dataset}
_BATCH = 500  # names per IN list


class Janitor:
    def __init__(self, settings: Settings, sessions: sessionmaker[Session],
                 dispatcher: JobDispatcher, store: ArtifactStore) -> None:
        self.settings = settings
        self._sessions = sessions
        self._dispatcher = dispatcher
        self._store = store
        self._database_back_at: float | None = time.monotonic()  # None while unreachable
        self._swept_at: float | None = None  # the last slower round that completed

    def run_forever(self) -> None:
        while True:
            self.tick()
            time.sleep(self.settings.janitor.interval_s)

    def tick(self) -> None:
        """One round of every duty; a failing duty is logged and retried next round."""
        for duty in (self.fail_stale_jobs, self.requeue_lost_jobs, self.resend_lost_webhooks,
                     self.remove_leftover_files, self.remove_abandoned_upload_writes,
                     self.remove_expired_resumable_uploads, self.purge_idempotency_keys,
                     self.sweep_when_due):
            try:
                duty()
            except OperationalError as err:
                if self._database_back_at is not None:
                    logger.warning("janitor: the database is unavailable (%s)",
                                   type(err.orig).__name__)
                self._database_back_at = None
                return
            except Exception:
                logger.exception("janitor: %s failed; it runs again next round", duty.__name__)
        if self._database_back_at is None:
            self._database_back_at = time.monotonic()

    def fail_stale_jobs(self) -> list[uuid.UUID]:
        stale_after = self.settings.jobs.stale_after_s
        back_at = self._database_back_at
        if back_at is None or time.monotonic() - back_at < stale_after:
            return []  # heartbeats could not be written while the database was away
        with self._sessions() as session, session.begin():
            resumed = self._requeue_stale_jobs(session, timedelta(seconds=stale_after))
            swept = job_state.sweep_stale(session, timedelta(seconds=stale_after))
        for job_id, config in resumed:  # a late redelivery of the old message finds it claimed
            self._dispatcher.send_job(job_id, config)
        if swept:
            logger.warning("failed %d stale job(s): %s", len(swept), ", ".join(map(str, swept)))
            with self._sessions() as session:
                for job_id in swept:
                    announce_end(session, self._dispatcher, job_id)
        return swept

    def _requeue_stale_jobs(self, session: Session, stale_after: timedelta
                            ) -> list[tuple[uuid.UUID, JobConfig]]:
        """Stale jobs go back to the queue for whichever worker takes them: a search in its
        search resumes at its next candidate (worker/pipeline/records/lost_jobs.py), any other
        starts over, while it has been sent again fewer than `jobs.lost_worker_resends` times."""
        resends = self.settings.jobs.lost_worker_resends
        requeued = []
        for job in job_state.stale_jobs(session, stale_after):
            if can_resume_search(job.config, job.stage, job.attempts - 1):
                why = ("the worker running this search stopped sending heartbeats; the search "
                       "resumes at its next candidate on the next worker")
            elif job.attempts <= resends:  # `attempts` counts its claims
                why = (f"the worker running this job ({job.worker}) stopped sending "
                       f"heartbeats in stage {job.stage!r} (it died or its host was lost); "
                       f"sent again to the next worker, which starts it over (resend "
                       f"{job.attempts} of {resends})")
            else:
                continue  # failed as WorkerLost by the sweep
            if job_state.requeue(session, job.id, why) is not None:
                requeued.append((job.id, JobConfig.model_validate(job.config)))
        if requeued:
            logger.warning("requeued %d job(s) whose worker was lost: %s", len(requeued),
                           ", ".join(str(job_id) for job_id, _ in requeued))
        return requeued

    def requeue_lost_jobs(self) -> list[uuid.UUID]:
        """Send again the queued jobs whose message is lost, or was taken by a worker that
        never claimed the job; `claim` makes a duplicate harmless."""
        cutoff = utc_now() - timedelta(seconds=self.settings.janitor.requeue_after_s)
        with self._sessions() as session:
            waiting = session.execute(select(Job.id, Job.config, Job.created_at).where(
                Job.status == JobStatus.QUEUED.value, Job.created_at < cutoff)).all()
        by_queue: dict[str, list[tuple[uuid.UUID, JobConfig]]] = defaultdict(list)
        for job_id, config, _ in waiting:
            parsed = JobConfig.model_validate(config)
            by_queue[job_queue(parsed)].append((job_id, parsed))
        if not by_queue:
            return []
        held = self._dispatcher.held_job_ids(by_queue)
        if held is None:
            logger.debug("janitor: this broker cannot be looked into; no job is re-sent")
            return []
        unclaimed = self._unclaimed({job_id: created for job_id, _, created in waiting})
        requeued = []
        for queue, jobs in by_queue.items():
            for job_id, config in jobs:
                if job_id in held and job_id not in unclaimed:
                    continue
                why = (f"a worker took its message over {self.settings.janitor.unclaimed_after_s:g}"
                       " s ago and never claimed the job (it probably died before starting "
                       "it)" if job_id in unclaimed
                       else "the broker held no message for this queued job")
                self._dispatcher.send_job(job_id, config)
                with self._sessions() as session, session.begin():
                    job_state.record_event(session, job_id, f"{_RESENT} {queue!r}: {why}")
                requeued.append(job_id)
        if requeued:
            logger.warning("re-sent %d queued job(s) whose message was lost or never claimed: "
                           "%s", len(requeued), ", ".join(map(str, requeued)))
        return requeued

    def _unclaimed(self, queued_at: Mapping[uuid.UUID, datetime]) -> set[uuid.UUID]:
        """The queued jobs (`queued_at`: when each was made) whose message a worker took
        without claiming them, with nothing recorded of them for unclaimed_after_s: not queued
        again (a resumed search), not re-sent, not started within that time."""
        since = utc_now() - timedelta(seconds=self.settings.janitor.unclaimed_after_s)
        old = {job_id for job_id, created in queued_at.items() if created < since}
        delivered = self._dispatcher.delivered_job_ids() if old else None
        candidates = old & (delivered or set())
        if not candidates:
            return set()
        with self._sessions() as session:
            recent = set(session.scalars(select(JobEvent.job_id).where(
                JobEvent.job_id.in_(candidates), JobEvent.created_at >= since)))
        return candidates - recent

    def purge_idempotency_keys(self) -> int:
        with self._sessions() as session, session.begin():
            purged = idempotency_keys.purge_expired(session)
        if purged:
            logger.info("purged %d expired idempotency key(s)", purged)
        return purged

    def sweep_when_due(self) -> None:
        """The slower round, once per `janitor.sweep_interval_s` (retried next tick if it fails)."""
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < self.settings.janitor.sweep_interval_s:
            return
        self.apply_retention()
        self.remove_unreferenced_uploads()
        self._swept_at = now

    def apply_retention(self) -> None:
        retention = self.settings.retention
        now = utc_now()
        if retention.artifacts_days is not None:
            expired = expire_artifacts(
                self._sessions, self._store,
                finished_before=now - timedelta(days=retention.artifacts_days))
            if expired:
                logger.info("retention: expired the artifacts of %d job(s) finished over %g "
                            "days ago", len(expired), retention.artifacts_days)
        if retention.events_days is not None:
            removed = delete_old_events(
                self._sessions, created_before=now - timedelta(days=retention.events_days))
            if removed:
                logger.info("retention: deleted %d event(s) of finished jobs older than %g days",
                            removed, retention.events_days)

    def remove_unreferenced_uploads(self) -> list[str]:
        """Stored model and dataset objects that no row (of any project) names; their URIs.
        Only those stored over JANITOR__UPLOAD_STALE_S ago: a new one's row commits just after
        it is moved in."""
        too_old = time.time() - self.settings.janitor.upload_stale_s
        removed = []
        for folder, kind in _UPLOAD_FOLDERS.items():
            uris = [listed.uri for listed in self._store.list_folder(folder)
                    if listed.modified_at < too_old]
            named: set[str] = set()
            with self._sessions() as session:
                for start in range(0, len(uris), _BATCH):
                    named.update(session.scalars(select(kind.storage_uri).where(
                        kind.storage_uri.in_(uris[start:start + _BATCH]))))
            for uri in uris:
                if uri not in named:
                    self._store.delete(uri)
                    removed.append(uri)
        if removed:
            logger.info("removed %d stored upload(s) no model or dataset names: %s",
                        len(removed), ", ".join(removed))
        return removed

    def remove_abandoned_upload_writes(self) -> list[str]:
        """Drop the store writes of uploads that stopped over JANITOR__UPLOAD_STALE_S ago
        without being committed or aborted (the API died); the keys they were for."""
        too_old = time.time() - self.settings.janitor.upload_stale_s
        removed = [key for folder in _UPLOAD_FOLDERS
                   for key in self._store.remove_abandoned_writes(folder, too_old)]
        if removed:
            logger.info("dropped %d upload write(s) left unfinished for over %g s (their "
                        "request died): %s", len(removed), self.settings.janitor.upload_stale_s,
                        ", ".join(removed))
        return removed

    def remove_expired_resumable_uploads(self) -> list[uuid.UUID]:
        """Remove the resumable uploads past their expiry (RESUMABLE__EXPIRY_S after their
        last piece: given up, or made into a model long ago) with their pieces, and drop the
        piece writes a dead API left unfinished in the live ones; the ids removed."""
        with self._sessions() as session:
            expired = resumable_uploads.expired_uploads(session)
            live = resumable_uploads.live_uploads(session)
        too_old = time.time() - self.settings.janitor.upload_stale_s
        for upload_id in live:
            self._store.remove_abandoned_writes(resumable_uploads.piece_folder(upload_id),
                                                too_old)
        removed = []
        for upload in expired:
            # The pieces first: a row is what finds them again if this round dies midway.
            self._store.delete_prefix(resumable_uploads.piece_folder(upload.id) + "/")
            with self._sessions() as session, session.begin():
                session.execute(delete(ResumableUpload).where(ResumableUpload.id == upload.id))
            removed.append(upload.id)
        if removed:
            logger.info("removed %d expired resumable upload(s) and their pieces: %s",
                        len(removed), ", ".join(map(str, removed)))
        return removed

    def resend_lost_webhooks(self) -> list[uuid.UUID]:
        """Send `webhooks.deliver` again for finished jobs whose delivery is overdue and whose
        message the broker does not hold; the ids of the jobs sent."""
        janitor = self.settings.janitor
        with self._sessions() as session:
            overdue = overdue_deliveries(
                session, now=utc_now(), after=timedelta(seconds=janitor.webhook_resend_after_s),
                within=timedelta(seconds=janitor.webhook_resend_within_s),
                webhooks=self.settings.webhooks)
        if not overdue:
            return []
        held = self._dispatcher.held_webhook_job_ids()
        if held is None:
            logger.debug("janitor: this broker cannot be looked into; no webhook is re-sent")
            return []
        resent = []
        for delivery in overdue:
            if delivery.job_id in held:
                continue  # waiting for a worker, or a retry waiting out its pause
            self._dispatcher.send_webhook(delivery.job_id)
            with self._sessions() as session, session.begin():
                job_state.record_event(session, delivery.job_id,
                                       f"webhook re-sent: {delivery.reason}")
            resent.append(delivery.job_id)
        if resent:
            logger.warning("re-sent the webhooks of %d finished job(s) the broker had lost: %s",
                           len(resent), ", ".join(map(str, resent)))
        return resent

    def remove_leftover_files(self) -> list[Path]:
        scratch, uploads = self._remove_scratch(), self._remove_stale_uploads()
        for path in scratch:
            logger.info("removed %s: scratch of job %s, which no longer runs", path,
                        _job_id_of(path.name.removesuffix(_STAGE_MARK_SUFFIX)))
        for path in uploads:
            logger.info("removed %s: an upload's temporary file untouched for over %g s (its "
                        "request died)", path, self.settings.janitor.upload_stale_s)
        self._remove_unrecorded_artifacts()
        return scratch + uploads

    def _remove_scratch(self) -> list[Path]:
        scratch = self.settings.scratch_dir
        if not scratch.is_dir():
            return []
        entries = {path: _job_id_of(path.name.removesuffix(_STAGE_MARK_SUFFIX))
                   for path in scratch.iterdir()}
        running = self._running({job_id for job_id in entries.values() if job_id is not None})
        removed = []
        for path, job_id in entries.items():
            if job_id is None or job_id in running:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        return removed

    def _remove_stale_uploads(self) -> list[Path]:
        uploads = self.settings.uploads_dir
        if not uploads.is_dir():
            return []
        too_old = time.time() - self.settings.janitor.upload_stale_s
        removed = []
        for path in uploads.iterdir():
            try:
                if path.stat().st_mtime >= too_old:
                    continue
                if path.is_dir():  # a model skeleton's folder, kept fresh while it is checked
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
            except FileNotFoundError:
                continue  # its request finished meanwhile
        return removed

    def _remove_unrecorded_artifacts(self) -> None:
        """A job's stored files without unexpired rows: the job did not succeed, was deleted,
        or its artifacts expired, so none are kept."""
        ids = {job_id for name in self._store.list_subfolders("jobs")
               if (job_id := _job_id_of(name))}
        if not ids:
            return
        with self._sessions() as session:
            jobs = {job_id: (status, attempts) for job_id, status, attempts in session.execute(
                select(Job.id, Job.status, Job.attempts).where(Job.id.in_(ids))).all()}
            recorded = set(session.scalars(select(Artifact.job_id).where(
                Artifact.job_id.in_(ids), Artifact.expired_at.is_(None))))
        for job_id in ids:
            status, attempts = jobs.get(job_id, (None, 0))
            if status in (JobStatus.RUNNING.value, JobStatus.QUEUED.value):
                continue  # still storing
            if job_id in recorded:
                if attempts > 1:
                    self._remove_earlier_attempts(job_id, attempts)
                continue  # stored and recorded
            self._store.delete_prefix(f"jobs/{job_id}/")
            logger.info("removed stored files of job %s: no rows recorded them (%s)", job_id,
                        status or "no such job")

    def _remove_earlier_attempts(self, job_id: uuid.UUID, attempts: int) -> None:
        """A job that succeeded on a later claim: the folders of the claims before it hold
        what a worker lost mid-store left (jobs/<id>/<attempt>/); only the last one's rows
        exist. Only jobs claimed more than once are listed, so a sweep stays cheap."""
        for attempt in self._store.list_subfolders(f"jobs/{job_id}"):
            if attempt.isdigit() and attempt != str(attempts):
                self._store.delete_prefix(f"jobs/{job_id}/{attempt}/")
                logger.info("removed stored files of job %s's attempt %s: its attempt %d "
                            "ended it", job_id, attempt, attempts)

    def _running(self, ids: set[uuid.UUID]) -> set[uuid.UUID]:
        if not ids:
            return set()
        with self._sessions() as session:
            return set(session.scalars(select(Job.id).where(
                Job.id.in_(ids), Job.status.in_([JobStatus.RUNNING.value,
                                                 JobStatus.QUEUED.value]))))


def _job_id_of(name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(name)
    except ValueError:
        return None


def main() -> None:
    settings = get_settings()
    configure_logging(settings.log_format, role="janitor")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sessions = sessionmaker(bind=make_engine(settings.resolved_database_url),
                            expire_on_commit=False)
    janitor = Janitor(settings, sessions, JobDispatcher(settings.resolved_broker_url),
                      artifact_store(settings))
    logger.info("janitor running every %g s on %s", settings.janitor.interval_s,
                settings.data_dir.resolve())
    janitor.run_forever()


if __name__ == "__main__":
    exit_on_invalid_settings(main, "fuseforge janitor")
