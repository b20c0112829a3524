"""The janitor, a process of its own: it fails jobs whose worker died, re-sends queued jobs and
finished jobs' webhooks whose message the broker lost (the database is the source of truth),
removes the files a crash left and purges expired idempotency keys. Real databases (a fresh
SQLite and PostgreSQL each), a real Redis and kombu's SQL broker, a real worker delivering to
a real HTTP receiver."""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from celery.contrib.testing.worker import start_worker
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
    ResumableUpload,
    WebhookDelivery,
)
from core.db.resumable_uploads import piece_folder, piece_key
from core.db.types import utc_now
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from core.queues import WEBHOOK_QUEUE
from core.settings import JanitorSettings, Settings, WebhookSettings
from core.storage import LocalArtifactStore
from core.webhooks.delivery import delivery_id
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import fresh_database
from tests.support.fake_tensorrt import FAKE_TENSORRT
from tests.support.scripted_http import Answer, scripted_server
from worker.celery_app import celery_app
from worker.janitor import Janitor
from worker.runtime import WorkerRuntime, use_runtime
from worker.tasks import deliver_webhook as _registers_the_task  # noqa: F401

HOOK = "https://hooks.example.com/fuseforge"
MINUTE = timedelta(minutes=1)


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


def _taken_by_a_worker(broker: redis.Redis, job_id: uuid.UUID) -> None:
    """Move the job's waiting message to Redis' unacked hash, as a worker that took it (and
    then died before claiming the job) leaves it."""
    [raw] = broker.lrange("cpu", 0, -1)
    broker.delete("cpu")
    broker.hset("unacked", f"tag-{job_id}", json.dumps([json.loads(raw), "cpu", "cpu"]))


def test_a_queued_job_a_worker_took_and_never_claimed_is_sent_again_once_in_a_while(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path, unclaimed_after_s=120)
    taken = _job(sessions)  # queued five minutes ago
    JobDispatcher(TEST_REDIS_URL).send_job(taken, JobConfig())
    _taken_by_a_worker(broker, taken)
    janitor = _janitor(settings, sessions)

    assert janitor.requeue_lost_jobs() == [taken]
    assert broker.llen("cpu") == 1  # sent again for another worker to claim
    assert any("never claimed the job" in m for m in _events(sessions, taken))
    # not again within unclaimed_after_s: the re-send is the latest thing recorded of it
    _taken_by_a_worker(broker, taken)
    assert janitor.requeue_lost_jobs() == []


def test_a_message_taken_moments_ago_is_left_to_the_worker_claiming_it(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path, unclaimed_after_s=3600)
    taken = _job(sessions)
    JobDispatcher(TEST_REDIS_URL).send_job(taken, JobConfig())
    _taken_by_a_worker(broker, taken)
    assert _janitor(settings, sessions).requeue_lost_jobs() == []
    assert broker.llen("cpu") == 0


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


def test_a_stale_running_job_is_sent_again_then_fails_but_not_right_after_a_database_outage(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    settings.jobs.stale_after_s = 1
    minute_ago = utc_now() - timedelta(minutes=1)
    lost = _job(sessions, JobStatus.RUNNING, heartbeat_at=minute_ago, attempts=1,
                worker="host-a:12", stage="benchmark")
    resent = _job(sessions, JobStatus.RUNNING, heartbeat_at=minute_ago, attempts=2)
    janitor = _janitor(settings, sessions)

    assert janitor.fail_stale_jobs() == []  # it has seen the database for less than 1 s
    time.sleep(1.1)
    assert janitor.fail_stale_jobs() == [resent]  # its one resend (the default) is used

    assert _status(sessions, resent) == "failed"
    assert _status(sessions, lost) == "queued"
    [raw] = broker.lrange("cpu", 0, -1)
    assert json.loads(base64.b64decode(json.loads(raw)["body"]))[0] == [str(lost)]
    with sessions() as session:
        assert job_state.count_events(
            session, lost, "the worker running this job (host-a:12) stopped sending heartbeats "
            "in stage 'benchmark'") == 1


def test_no_stale_job_is_sent_again_when_resends_are_off(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    settings.jobs.stale_after_s, settings.jobs.lost_worker_resends = 1, 0
    stale = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1),
                 attempts=1)
    janitor = _janitor(settings, sessions)
    time.sleep(1.1)

    assert janitor.fail_stale_jobs() == [stale] and broker.llen("cpu") == 0


def test_a_stale_job_with_a_callback_gets_its_webhook_task_sent(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)
    settings.jobs.stale_after_s, settings.jobs.lost_worker_resends = 1, 0
    hooked = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1),
                  config=JobConfig(callback_url="https://hooks.example.com/fuseforge"),
                  attempts=1)
    silent = _job(sessions, JobStatus.RUNNING, heartbeat_at=utc_now() - timedelta(minutes=1),
                  attempts=1)
    janitor = _janitor(settings, sessions)
    time.sleep(1.1)

    assert sorted(janitor.fail_stale_jobs()) == sorted([hooked, silent])
    [raw] = broker.lrange("webhooks", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "webhooks.deliver"
    assert json.loads(base64.b64decode(message["body"]))[0] == [str(hooked)]


def test_leftover_files_go_and_live_ones_stay(tmp_path: Path, sessions: sessionmaker[Session],
                                              caplog: pytest.LogCaptureFixture) -> None:
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

    with caplog.at_level(logging.INFO, logger="worker.janitor"):
        _janitor(settings, sessions).remove_leftover_files()

    assert sorted(p.name for p in scratch.iterdir()) == sorted(
        [str(running), f"{running}.stage.json"])
    # each removal is a log line naming the file and why it went
    logged = [record.getMessage() for record in caplog.records]
    assert any(str(scratch / str(failed)) in line and "no longer runs" in line
               for line in logged), logged
    assert any(str(dead_upload) in line and "untouched for over 60 s" in line
               for line in logged), logged
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


def _ended(sessions: sessionmaker[Session], ago: timedelta, callback_url: str | None = HOOK,
           status: JobStatus = JobStatus.SUCCEEDED) -> uuid.UUID:
    """A job that ended `ago`, with `callback_url`."""
    return _job(sessions, status, config=JobConfig(callback_url=callback_url),
                finished_at=utc_now() - ago)


def _attempt(sessions: sessionmaker[Session], job_id: uuid.UUID, number: int, ago: timedelta,
             status_code: int | None, final: bool) -> None:
    """A recorded delivery attempt, made `ago`."""
    with sessions() as session, session.begin():
        session.add(WebhookDelivery(
            job_id=job_id, delivery_id=delivery_id(job_id, "job.succeeded"),
            event="job.succeeded", attempt=number, url=HOOK, status_code=status_code,
            error=None if status_code == 200 else "the receiver answered 503",
            duration_ms=3.0, final=final, created_at=utc_now() - ago))


def _webhook_messages(broker: redis.Redis) -> list[uuid.UUID]:
    """The job ids of the webhooks.deliver messages waiting in the webhooks queue."""
    ids = []
    for raw in broker.lrange(WEBHOOK_QUEUE, 0, -1):
        message = json.loads(raw)
        assert message["headers"]["task"] == "webhooks.deliver"
        ids.append(uuid.UUID(json.loads(base64.b64decode(message["body"]))[0][0]))
    return ids


def _events(sessions: sessionmaker[Session], job_id: uuid.UUID) -> list[str]:
    with sessions() as session:
        return [e.message for e in session.query(JobEvent).filter(JobEvent.job_id == job_id)]


def test_a_finished_jobs_lost_webhook_is_sent_again_once(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path)  # overdue: 300 s past the end, or past the retry's due time
    never_tried = _ended(sessions, 10 * MINUTE)  # its message never reached (or left) the broker
    retry_lost = _ended(sessions, 10 * MINUTE, status=JobStatus.FAILED)
    _attempt(sessions, retry_lost, 1, 9 * MINUTE, 503, final=False)  # attempt 2 due 1 s later
    retry_due_now = _ended(sessions, 10 * MINUTE)
    _attempt(sessions, retry_due_now, 1, timedelta(seconds=1), 503, final=False)
    delivered = _ended(sessions, 10 * MINUTE)
    _attempt(sessions, delivered, 1, 9 * MINUTE, 200, final=True)
    given_up = _ended(sessions, 10 * MINUTE)
    _attempt(sessions, given_up, 1, 9 * MINUTE, 503, final=True)
    just_ended = _ended(sessions, 1 * MINUTE)  # its message may still be on its way
    long_ago = _ended(sessions, timedelta(days=2))  # older than webhook_resend_within_s
    no_callback = _ended(sessions, 10 * MINUTE, callback_url=None)
    _job(sessions, JobStatus.RUNNING, config=JobConfig(callback_url=HOOK),
         heartbeat_at=utc_now())
    janitor = _janitor(settings, sessions)

    assert sorted(janitor.resend_lost_webhooks()) == sorted([never_tried, retry_lost])
    assert sorted(_webhook_messages(broker)) == sorted([never_tried, retry_lost])
    assert janitor.resend_lost_webhooks() == []  # the broker holds their messages now
    assert len(_webhook_messages(broker)) == 2
    [resent] = [m for m in _events(sessions, never_tried) if m.startswith("webhook re-sent")]
    assert "no delivery attempt was made in the 600 s since the job ended" in resent
    assert any(m.startswith("webhook re-sent: attempt 2 was due")
               for m in _events(sessions, retry_lost))
    for job_id in (retry_due_now, delivered, given_up, just_ended, long_ago, no_callback):
        assert not any(m.startswith("webhook re-sent") for m in _events(sessions, job_id))


def test_the_embedded_sql_broker_holding_the_webhook_message_is_left_alone(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"
    dispatcher = JobDispatcher(url)
    dispatcher.declare_queues()
    held, lost = _ended(sessions, timedelta(minutes=10)), _ended(sessions, timedelta(minutes=10))
    dispatcher.send_webhook(held)

    assert _janitor(_settings(tmp_path, broker_url=url), sessions).resend_lost_webhooks() == [lost]
    assert dispatcher.held_webhook_job_ids() == {held, lost}


def _drained(broker: redis.Redis, timeout_s: float = 30) -> None:
    """Wait until the worker has run (and, acks_late, acknowledged) every webhook message."""
    deadline = time.monotonic() + timeout_s
    while broker.llen(WEBHOOK_QUEUE) or broker.hlen("unacked"):
        assert time.monotonic() < deadline, "the worker did not take the webhook messages"
        time.sleep(0.05)


def test_a_resent_webhook_is_delivered_by_a_worker_once_and_never_again(
        tmp_path: Path, sessions: sessionmaker[Session], broker: redis.Redis) -> None:
    settings = _settings(tmp_path).model_copy(update={"webhooks": WebhookSettings(
        secret="s" * 32, allowed_networks=["127.0.0.0/8"], timeout_s=5)})
    runtime = WorkerRuntime(settings=settings, sessions=sessions,
                            store=LocalArtifactStore(settings.artifacts_dir),
                            toolkit=FAKE_TENSORRT, capabilities=FAKE_TENSORRT.detect_capabilities())
    with (scripted_server([Answer(204)]) as receiver, use_runtime(runtime),
          start_worker(celery_app, pool="solo", perform_ping_check=False,
                       queues=[WEBHOOK_QUEUE], shutdown_timeout=30)):
        job_id = _ended(sessions, timedelta(minutes=10), callback_url=f"{receiver.base_url}/hook")
        janitor = _janitor(settings, sessions)

        assert janitor.resend_lost_webhooks() == [job_id]
        _drained(broker)
        assert [r.path for r in receiver.received] == ["/hook"]

        janitor.tick()  # delivered: nothing is overdue
        JobDispatcher(TEST_REDIS_URL).send_webhook(job_id)  # a duplicate message all the same
        _drained(broker)

    assert len(receiver.received) == 1
    with sessions() as session:
        [attempt] = session.query(WebhookDelivery).filter(WebhookDelivery.job_id == job_id)
        assert (attempt.status_code, attempt.final, attempt.error) == (204, True, None)


def test_an_expired_resumable_upload_goes_with_its_pieces_and_a_live_one_stays(
        tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    settings = _settings(tmp_path)
    store = LocalArtifactStore(settings.artifacts_dir)
    uploads = {}
    with sessions() as session:
        for name, expires_in in (("expired", -1.0), ("live", 3600.0)):
            row = ResumableUpload(project_id=DEFAULT_PROJECT_ID, length=10, offset=4, pieces=1,
                                  expires_at=utc_now() + timedelta(seconds=expires_in))
            session.add(row)
            session.commit()
            uploads[name] = row.id
            piece = settings.artifacts_dir / piece_key(row.id, 0)
            piece.parent.mkdir(parents=True)
            piece.write_bytes(b"abcd")

    removed = _janitor(settings, sessions).remove_expired_resumable_uploads()

    assert removed == [uploads["expired"]]
    assert not (settings.artifacts_dir / piece_folder(uploads["expired"])).exists()
    assert store.exists(store.uri_for(piece_key(uploads["live"], 0)))
    with sessions() as session:
        assert set(session.scalars(select(ResumableUpload.id))) == {uploads["live"]}
