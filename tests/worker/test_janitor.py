"""The janitor, a process of its own: it fails jobs whose worker died, re-sends queued jobs whose
message the broker lost (the database is the source of truth), removes the files a crash
left and purges expired idempotency keys. Real databases (a fresh SQLite and PostgreSQL each),
a real Redis and kombu's SQL broker."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from kombu.connection import Connection
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core.db import idempotency_keys, job_state
from core.db.models import (
    DEFAULT_PROJECT_ID,
    Artifact,
    IdempotencyKey,
    Job,
    JobEvent,
    JobStatus,
    Model,
)
from core.db.types import utc_now
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from core.settings import JanitorSettings, Settings
from core.storage import LocalArtifactStore
from tests.conftest import TEST_REDIS_URL
from tests.support.databases import fresh_database
from worker.janitor import Janitor


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A fresh database per test: the janitor looks at every job in it."""
    with fresh_database(request.param, tmp_path, name="fuseforge_janitor") as engine:
        yield engine


@pytest.fixture
def sessions(database: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=database, expire_on_commit=False)


def _settings(tmp_path: Path, broker_url: str = TEST_REDIS_URL, **janitor: float) -> Settings:
    return Settings(env="test", data_dir=tmp_path / "data", broker_url=broker_url,
                    janitor=JanitorSettings(requeue_after_s=0.01, **janitor))


def _janitor(settings: Settings, sessions: sessionmaker[Session]) -> Janitor:
    return Janitor(settings, sessions, JobDispatcher(settings.resolved_broker_url),
                   LocalArtifactStore(settings.artifacts_dir))


def _job(sessions: sessionmaker[Session], status: JobStatus = JobStatus.QUEUED,
         config: JobConfig | None = None, **columns: object) -> uuid.UUID:
    with sessions() as session, session.begin():
        model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                      size_bytes=1, storage_uri="store://m",
                      ir_version=8, opset=17, producer="test", inputs=[], outputs=[])
        job = Job(project_id=DEFAULT_PROJECT_ID, model=model,
                  config=(config or JobConfig()).model_dump(mode="json"),
                  status=status.value, created_at=utc_now() - timedelta(minutes=5), **columns)
        session.add(job)
    return job.id


def _status(sessions: sessionmaker[Session], job_id: uuid.UUID) -> str:
    with sessions() as session:
        return session.get_one(Job, job_id).status


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


def test_a_queued_job_whose_message_was_lost_is_sent_again_once(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    lost = _job(sessions)  # its message never reached (or left) the broker
    held = _job(sessions)
    JobDispatcher(TEST_REDIS_URL).send_job(held, JobConfig())
    gpu = _job(sessions, config=JobConfig(backend="tensorrt", target_gpu="9.0"))
    janitor = _janitor(settings, sessions)

    assert set(janitor.requeue_lost_jobs()) == {lost, gpu}
    dispatcher = JobDispatcher(TEST_REDIS_URL)
    assert dispatcher.held_job_ids(["cpu"]) == {lost, held}
    assert dispatcher.held_job_ids(["gpu.sm90"]) == {gpu}
    assert janitor.requeue_lost_jobs() == []  # the broker holds them all now
    assert broker.llen("cpu") == 2
    with sessions() as session:
        events = [e.message for e in session.query(JobEvent).filter(JobEvent.job_id == lost)]
    assert any(m.startswith("re-sent to queue 'cpu'") for m in events)


def test_a_job_queued_moments_ago_is_left_to_its_own_message(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    settings.janitor.requeue_after_s = 3600
    _job(sessions)  # five minutes old: younger than the hour allowed
    assert _janitor(settings, sessions).requeue_lost_jobs() == []
    assert broker.llen("cpu") == 0


def test_the_embedded_sql_broker_is_looked_into_too(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"
    settings = _settings(tmp_path, broker_url=url)
    dispatcher = JobDispatcher(url)
    dispatcher.declare_queues()
    lost, held, delivered = _job(sessions), _job(sessions), _job(sessions)
    dispatcher.send_job(delivered, JobConfig())
    with Connection(url) as connection:  # a worker took it (and lost it before the claim)
        connection.SimpleQueue("cpu").get(timeout=5).ack()
    dispatcher.send_job(held, JobConfig())

    assert sorted(_janitor(settings, sessions).requeue_lost_jobs()) == sorted([lost, delivered])
    assert dispatcher.held_job_ids(["cpu"]) == {lost, held, delivered}


def test_a_stale_running_job_fails_but_not_right_after_a_database_outage(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    settings = _settings(tmp_path)
    settings.jobs.stale_after_s = 1
    stale = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1))
    janitor = _janitor(settings, sessions)

    assert janitor.fail_stale_jobs() == []  # it has seen the database for less than 1 s
    time.sleep(1.1)
    assert janitor.fail_stale_jobs() == [stale]
    assert _status(sessions, stale) == "failed"


def test_a_stale_job_with_a_callback_gets_its_webhook_task_sent(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    settings.jobs.stale_after_s = 1
    hooked = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1),
                  config=JobConfig(callback_url="https://hooks.example.com/fuseforge"))
    silent = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1))
    janitor = _janitor(settings, sessions)
    time.sleep(1.1)

    assert sorted(janitor.fail_stale_jobs()) == sorted([hooked, silent])
    [raw] = broker.lrange("webhooks", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "webhooks.deliver"
    assert json.loads(base64.b64decode(message["body"]))[0] == [str(hooked)]


def test_leftover_files_go_and_live_ones_stay(tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    settings = _settings(tmp_path, upload_stale_s=60)
    running = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now())
    failed = _job(sessions, JobStatus.FAILED)
    succeeded = _job(sessions, JobStatus.SUCCEEDED)
    store = LocalArtifactStore(settings.artifacts_dir)
    scratch = settings.scratch_dir
    for job_id in (running, failed, uuid.uuid4()):
        (scratch / str(job_id)).mkdir(parents=True)
        (scratch / f"{job_id}.stage.json").write_text("{}")
    source = tmp_path / "engine.onnx"
    source.write_bytes(b"engine")
    for job_id in (running, failed, succeeded):
        stored = store.put_file(source, f"jobs/{job_id}/engine.onnx")
    with sessions() as session, session.begin():
        session.add(Artifact(job_id=succeeded, name="engine.onnx", kind="engine", uri=stored.uri,
                             sha256=stored.sha256, size_bytes=stored.size_bytes))
    settings.uploads_dir.mkdir(parents=True)
    dead_upload, live_upload = settings.uploads_dir / "a.part", settings.uploads_dir / "b.part"
    dead_upload.write_bytes(b"x")
    live_upload.write_bytes(b"y")
    hour_ago = time.time() - 3600
    os.utime(dead_upload, (hour_ago, hour_ago))

    _janitor(settings, sessions).remove_leftover_files()

    assert sorted(p.name for p in scratch.iterdir()) == sorted(
        [str(running), f"{running}.stage.json"])
    jobs_dir = settings.artifacts_dir / "jobs"
    assert sorted(p.name for p in jobs_dir.iterdir()) == sorted([str(running), str(succeeded)])
    assert not dead_upload.exists() and live_upload.exists()
    with sessions() as session:
        job_state.status_of(session, running)  # the rows are untouched


def test_a_tick_purges_idempotency_keys_past_their_24_hours_and_keeps_younger_ones(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    settings = _settings(tmp_path)
    ttl, lease = (timedelta(seconds=settings.idempotency.ttl_s),
                  timedelta(seconds=settings.idempotency.lease_s))
    assert ttl == timedelta(hours=24)
    now = utc_now()
    with sessions() as session, session.begin():
        for key, answered in (("day-old", now - timedelta(hours=25)),
                              ("hour-old", now - timedelta(hours=1))):
            row_id = idempotency_keys.claim(session, project_id=DEFAULT_PROJECT_ID,
                                            route="POST /v1/jobs", key=key, fingerprint="f" * 64,
                                            lease=lease, now=answered)
            assert row_id is not None
            idempotency_keys.record_answer(session, row_id, status_code=202, body="{}",
                                           ttl=ttl, now=answered)
        # A claim whose request never answered (its API process died) and whose lease lapsed.
        idempotency_keys.claim(session, project_id=DEFAULT_PROJECT_ID, route="POST /v1/models",
                               key="abandoned", fingerprint="f" * 64, lease=lease,
                               now=now - lease - timedelta(seconds=1))

    _janitor(settings, sessions).tick()

    with sessions() as session:
        assert set(session.scalars(select(IdempotencyKey.key))) == {"hour-old"}
