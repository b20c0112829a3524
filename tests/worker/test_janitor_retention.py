"""The janitor's slower round: retention (FUSEFORGE_RETENTION__*) expires the artifacts of long
finished jobs (rows kept, files removed) and deletes their old events, never touching a queued
or running job; stored uploads no row names are removed, and files that a delete or an expiry
failed to remove are swept. Real databases (a fresh SQLite and PostgreSQL each)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, Artifact, Dataset, Job, JobEvent, JobStatus, Model
from core.db.types import utc_now
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from core.settings import JanitorSettings, RetentionSettings, Settings
from core.storage import LocalArtifactStore
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import fresh_database
from worker.janitor import Janitor

DAY = timedelta(days=1)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with fresh_database(request.param, tmp_path, name="fuseforge_retention") as engine:
        yield engine


@pytest.fixture
def sessions(database: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=database, expire_on_commit=False)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(env="test", data_dir=tmp_path / "data", broker_url=TEST_REDIS_URL,
                    janitor=JanitorSettings(upload_stale_s=60),
                    retention=RetentionSettings(artifacts_days=30, events_days=7))


@pytest.fixture
def store(settings: Settings) -> LocalArtifactStore:
    return LocalArtifactStore(settings.artifacts_dir)


def _janitor(settings: Settings, sessions: sessionmaker[Session]) -> Janitor:
    return Janitor(settings, sessions, JobDispatcher(settings.resolved_broker_url),
                   LocalArtifactStore(settings.artifacts_dir))


def _job(sessions: sessionmaker[Session], store: LocalArtifactStore, status: JobStatus,
         age: timedelta) -> uuid.UUID:
    """A job created (and, if finished, ended) `age` ago with a stored artifact and an event
    that old; running jobs store files too (their rows come with `succeeded`)."""
    when = utc_now() - age
    with sessions() as session, session.begin():
        model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                      size_bytes=1, storage_uri="store://models/m.onnx", ir_version=8,
                      opset=17, producer="test", inputs=[], outputs=[])
        job = Job(project_id=DEFAULT_PROJECT_ID, model=model,
                  config=JobConfig().model_dump(mode="json"), status=status.value,
                  created_at=when, finished_at=when if status.is_final else None)
        session.add(job)
        session.flush()
        session.add(JobEvent(job_id=job.id, message="queued", created_at=when))
    source = store.root / "source.bin"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(b"engine")
    stored = store.put_file(source, f"jobs/{job.id}/engine.onnx")
    if status.is_final:
        with sessions() as session, session.begin():
            session.add(Artifact(job_id=job.id, name="engine.onnx", kind="engine",
                                 uri=stored.uri, sha256=stored.sha256,
                                 size_bytes=stored.size_bytes, created_at=when))
    return job.id


def _files(store: LocalArtifactStore, job_id: uuid.UUID) -> list[str]:
    folder = store.root / "jobs" / str(job_id)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _expired(sessions: sessionmaker[Session], job_id: uuid.UUID) -> list[bool]:
    with sessions() as session:
        return [at is not None for at in session.scalars(
            select(Artifact.expired_at).where(Artifact.job_id == job_id))]


def _events(sessions: sessionmaker[Session], job_id: uuid.UUID) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(JobEvent)
                              .where(JobEvent.job_id == job_id)) or 0


def test_retention_expires_old_artifacts_and_events_of_finished_jobs_only(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    old = {status: _job(sessions, store, status, 40 * DAY)
           for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)}
    running = _job(sessions, store, JobStatus.RUNNING, 40 * DAY)
    queued = _job(sessions, store, JobStatus.QUEUED, 40 * DAY)
    recent = _job(sessions, store, JobStatus.SUCCEEDED, 10 * DAY)  # events old, artifacts not

    _janitor(settings, sessions).apply_retention()

    for job_id in old.values():
        assert _expired(sessions, job_id) == [True]  # the row stays, marked
        assert _files(store, job_id) == []
        assert _events(sessions, job_id) == 0
    for job_id in (running, queued):
        assert _files(store, job_id) == ["engine.onnx"] and _events(sessions, job_id) == 1
    assert _expired(sessions, recent) == [False] and _files(store, recent) == ["engine.onnx"]
    assert _events(sessions, recent) == 0
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 6  # every job stays


def test_nothing_expires_while_retention_is_unset(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    settings = Settings(env="test", data_dir=tmp_path / "data", broker_url=TEST_REDIS_URL)
    store = LocalArtifactStore(settings.artifacts_dir)
    ancient = _job(sessions, store, JobStatus.SUCCEEDED, 3650 * DAY)

    _janitor(settings, sessions).sweep_when_due()

    assert _expired(sessions, ancient) == [False] and _files(store, ancient) == ["engine.onnx"]
    assert _events(sessions, ancient) == 1


def test_the_slower_round_runs_once_per_sweep_interval(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    janitor = _janitor(settings, sessions)
    janitor.tick()  # the first tick runs it
    old = _job(sessions, store, JobStatus.SUCCEEDED, 40 * DAY)

    janitor.tick()
    assert _expired(sessions, old) == [False]  # within the hour since the last round

    settings.janitor.sweep_interval_s = 0.01
    time.sleep(0.02)
    janitor.tick()
    assert _expired(sessions, old) == [True] and _files(store, old) == []


def test_files_an_expiry_or_a_delete_failed_to_remove_are_swept(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    expired = _job(sessions, store, JobStatus.SUCCEEDED, 1 * DAY)
    kept = _job(sessions, store, JobStatus.SUCCEEDED, 1 * DAY)
    with sessions() as session, session.begin():  # expired, but its file stayed behind
        session.execute(Artifact.__table__.update().where(Artifact.job_id == expired)
                        .values(expired_at=utc_now()))
    deleted = uuid.uuid4()  # a deleted job's folder
    (store.root / "jobs" / str(deleted)).mkdir(parents=True)
    (store.root / "jobs" / str(deleted) / "engine.onnx").write_bytes(b"engine")

    _janitor(settings, sessions).remove_leftover_files()

    assert _files(store, expired) == [] and _files(store, deleted) == []
    assert _files(store, kept) == ["engine.onnx"]


def test_stored_uploads_no_row_names_are_removed_once_stale(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    def stored(key: str, age_s: float) -> Path:
        path = store.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"bytes")
        os.utime(path, (time.time() - age_s, time.time() - age_s))
        return path

    named_model, named_dataset = stored("models/a.onnx", 3600), stored("datasets/a.npz", 3600)
    orphan_model, orphan_dataset = stored("models/b.onnx", 3600), stored("datasets/b.npz", 3600)
    just_moved_in = stored("models/c.onnx", 5)  # its row commits in a moment
    with sessions() as session, session.begin():
        session.add(Model(project_id=DEFAULT_PROJECT_ID, name="a", sha256="a" * 64,
                          size_bytes=5, storage_uri="store://models/a.onnx", ir_version=8,
                          opset=17, producer="test", inputs=[], outputs=[]))
        session.add(Dataset(project_id=DEFAULT_PROJECT_ID, name="a", sha256="a" * 64,
                            size_bytes=5, storage_uri="store://datasets/a.npz", samples=1,
                            arrays=[], has_labels=False))

    removed = _janitor(settings, sessions).remove_unreferenced_uploads()

    assert sorted(removed) == ["store://datasets/b.npz", "store://models/b.onnx"]
    assert named_model.exists() and named_dataset.exists() and just_moved_in.exists()
    assert not orphan_model.exists() and not orphan_dataset.exists()


def test_upload_writes_an_api_abandoned_are_dropped_once_stale_and_live_ones_kept(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    dead, live = store.open_writer("models/dead.onnx"), store.open_writer("models/live.onnx")
    for writer in (dead, live):
        writer.write(b"half a model")
    dead_file = next((store.root / "models").glob(".dead.onnx.*"))
    long_ago = time.time() - settings.janitor.upload_stale_s - 60
    os.utime(dead_file, (long_ago, long_ago))  # its API died an hour ago

    removed = _janitor(settings, sessions).remove_abandoned_upload_writes()

    assert removed == ["models/dead.onnx"] and not dead_file.exists()
    assert live.commit() == "store://models/live.onnx"
    assert (store.root / "models" / "live.onnx").read_bytes() == b"half a model"


def test_a_job_that_succeeded_on_a_later_claim_keeps_only_that_claims_files(
        settings: Settings, sessions: sessionmaker[Session], store: LocalArtifactStore) -> None:
    job_id = _job(sessions, store, JobStatus.SUCCEEDED, 1 * DAY)
    with sessions() as session, session.begin():
        session.execute(Job.__table__.update().where(Job.id == job_id).values(attempts=2))
    for attempt in ("1", "2"):  # a worker lost mid-store left attempt 1's engine behind
        folder = store.root / "jobs" / str(job_id) / attempt
        folder.mkdir(parents=True)
        (folder / "engine.onnx").write_bytes(b"engine")

    _janitor(settings, sessions).remove_leftover_files()

    assert _files(store, job_id) == ["2", "engine.onnx"]
