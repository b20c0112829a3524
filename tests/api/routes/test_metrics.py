"""GET /metrics: Prometheus text read from the database and the broker at scrape time."""

import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from datetime import timedelta

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.deps import get_api_settings, get_read_sessions, get_session
from api.main import create_app
from core.db import job_state
from core.db.models import Job, JobEvent, WebhookDelivery
from core.db.session import make_engine
from core.db.types import utc_now
from core.settings import MetricsSettings, Settings
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_keys import bearer, new_key
from tests.support.worker_heartbeats import CPU_ONLY, H200, beat

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _app_client(settings: Settings, db_session: Session) -> TestClient:
    """An app made with `settings`, sending an API key of a project of its own (/metrics needs
    none; the routes that make jobs to count do)."""
    app = create_app(settings)
    app.dependency_overrides[get_session] = lambda: db_session
    app.dependency_overrides[get_read_sessions] = lambda: lambda: nullcontext(db_session)
    app.dependency_overrides[get_api_settings] = lambda: settings
    return TestClient(app, headers=bearer(new_key(db_session, settings)[1]))


@pytest.fixture
def metrics_client(db_session: Session, settings: Settings, broker: redis.Redis
                   ) -> Iterator[TestClient]:
    """An API client whose /metrics reads afresh on every scrape (no cache)."""
    settings = settings.model_copy(update={"metrics": MetricsSettings(cache_s=0)})
    with _app_client(settings, db_session) as client:
        yield client


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _upload(client: TestClient) -> str:
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _submit(client: TestClient, model_id: str, **config: object) -> str:
    response = client.post("/v1/jobs", json={"model_id": model_id, **config})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_jobs_are_counted_by_status_and_backend(metrics_client: TestClient) -> None:
    before = scrape(metrics_client)
    assert value(before, "fuseforge_jobs", status="queued", backend="onnxruntime") == 0
    model_id = _upload(metrics_client)
    _submit(metrics_client, model_id, backend="onnxruntime")
    cancelled = _submit(metrics_client, model_id, backend="onnxruntime")
    _submit(metrics_client, model_id, backend="tensorrt")
    assert metrics_client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200

    after = scrape(metrics_client)

    assert value(after, "fuseforge_jobs", status="queued", backend="onnxruntime") == 1
    assert value(after, "fuseforge_jobs", status="cancelled", backend="onnxruntime") == 1
    assert value(after, "fuseforge_jobs", status="queued", backend="tensorrt") == 1
    assert value(after, "fuseforge_jobs", status="succeeded", backend="tensorrt") == 0
    assert value(after, "fuseforge_metrics_source_up", source="database") == 1


def test_queue_depth_counts_the_messages_waiting_in_each_redis_queue(
        metrics_client: TestClient, broker: redis.Redis) -> None:
    model_id = _upload(metrics_client)
    _submit(metrics_client, model_id, backend="onnxruntime")
    _submit(metrics_client, model_id, backend="tensorrt", target_gpu="9.0")
    broker.lpush("cpu", b"{}", b"{}")  # two more messages, as another producer would send

    samples = scrape(metrics_client)

    assert value(samples, "fuseforge_queue_depth", queue="cpu") == 3
    assert value(samples, "fuseforge_queue_depth", queue="gpu") == 0
    # a queue only a queued job's target_gpu names is reported too
    assert value(samples, "fuseforge_queue_depth", queue="gpu.sm90") == 1
    assert value(samples, "fuseforge_metrics_source_up", source="broker") == 1


def test_stage_durations_come_from_the_stage_events_of_finished_jobs(
        metrics_client: TestClient, db_session: Session) -> None:
    job_id = _submit(metrics_client, _upload(metrics_client), backend="onnxruntime")
    job = db_session.get(Job, uuid.UUID(job_id))
    assert job is not None
    job_state.claim(db_session, job.id, "celery@test")
    start = utc_now() - timedelta(seconds=60)
    for stage, after_s in (("load", 0), ("optimize", 2), ("validate", 7)):
        db_session.add(JobEvent(job_id=job.id, stage=stage, message=f"stage {stage} started",
                                created_at=start + timedelta(seconds=after_s)))
        db_session.add(JobEvent(job_id=job.id, stage=stage, message="a note, not a stage",
                                created_at=start + timedelta(seconds=after_s + 1)))
    job_state.succeed(db_session, job.id)
    db_session.execute(update(Job).where(Job.id == job.id)
                       .values(finished_at=start + timedelta(seconds=37)))
    db_session.commit()

    samples = scrape(metrics_client)

    def bucket(stage: str, le: str) -> float:
        return value(samples, "fuseforge_job_stage_duration_seconds_bucket", stage=stage,
                     backend="onnxruntime", le=le)

    assert (bucket("load", "1.0"), bucket("load", "2.5")) == (0, 1)  # 2 s
    assert (bucket("optimize", "2.5"), bucket("optimize", "5.0")) == (0, 1)  # 5 s
    assert (bucket("validate", "10.0"), bucket("validate", "30.0")) == (0, 1)  # 30 s
    assert bucket("validate", "+Inf") == 1
    assert value(samples, "fuseforge_job_stage_duration_seconds_gsum", stage="validate",
                 backend="onnxruntime") == pytest.approx(30)


def test_stored_upload_bytes_and_online_workers_by_queue(
        metrics_client: TestClient, db_session: Session) -> None:
    empty = scrape(metrics_client)
    _upload(metrics_client)
    beat(db_session, "celery@gpu", H200, ["gpu", "gpu.sm90", "gpu.nvidia-h200"])
    beat(db_session, "celery@cpu", CPU_ONLY, ["cpu"])
    beat(db_session, "celery@expired", CPU_ONLY, ["cpu"], minutes_ago=10)

    samples = scrape(metrics_client)

    assert value(empty, "fuseforge_stored_uploads", kind="model") == 0
    assert value(samples, "fuseforge_stored_uploads", kind="model") == 1
    assert value(samples, "fuseforge_stored_upload_bytes", kind="model") == len(
        model_bytes(small_cnn()))
    assert value(samples, "fuseforge_stored_upload_bytes", kind="dataset") == 0
    assert value(empty, "fuseforge_workers_online", queue="cpu") == 0
    assert value(samples, "fuseforge_workers_online", queue="cpu") == 1  # not the expired one
    assert value(samples, "fuseforge_workers_online", queue="gpu.sm90") == 1
    # the queues online workers consume are the ones whose depth is reported
    assert value(samples, "fuseforge_queue_depth", queue="gpu.nvidia-h200") == 0


def test_a_scrape_within_cache_s_reuses_the_last_numbers(
        db_session: Session, settings: Settings, broker: redis.Redis) -> None:
    cached = settings.model_copy(update={"metrics": MetricsSettings(cache_s=60)})
    with _app_client(cached, db_session) as client:
        first = scrape(client)
        _upload(client)
        second = scrape(client)

    assert value(second, "fuseforge_stored_uploads", kind="model") == value(
        first, "fuseforge_stored_uploads", kind="model") == 0


def test_metrics_disabled_in_settings_is_404(
        db_session: Session, settings: Settings, broker: redis.Redis) -> None:
    off = settings.model_copy(update={"metrics": MetricsSettings(enabled=False)})
    with _app_client(off, db_session) as client:
        assert client.get("/metrics").status_code == 404


def test_unreachable_database_is_reported_and_broker_metrics_still_are(
        metrics_client: TestClient) -> None:
    # Nothing listens on port 1: every connection is refused at once.
    unreachable = sessionmaker(bind=make_engine(
        "postgresql+psycopg://fuseforge@127.0.0.1:1/none?connect_timeout=2"))
    app = metrics_client.app
    app.dependency_overrides[get_read_sessions] = lambda: unreachable  # type: ignore[attr-defined]

    samples = scrape(metrics_client)

    assert value(samples, "fuseforge_metrics_source_up", source="database") == 0
    assert value(samples, "fuseforge_metrics_source_up", source="broker") == 1
    assert value(samples, "fuseforge_queue_depth", queue="cpu") == 0
    assert not any(name == "fuseforge_jobs" for name, _ in samples)


def test_webhook_delivery_attempts_are_counted_by_outcome(
        metrics_client: TestClient, db_session: Session) -> None:
    empty = scrape(metrics_client)
    model_id = _upload(metrics_client)
    job_id = uuid.UUID(_submit(metrics_client, model_id, backend="onnxruntime"))
    for attempt, status_code, error, final in (
            (1, 503, "the receiver answered 503", False),
            (2, None, "ConnectError: refused", False),
            (3, 200, None, True)):
        db_session.add(WebhookDelivery(
            job_id=job_id, delivery_id=uuid.uuid4(), event="job.succeeded", attempt=attempt,
            url="https://hooks.example/x", status_code=status_code, error=error,
            duration_ms=5.0, final=final))
    other = uuid.UUID(_submit(metrics_client, model_id, backend="onnxruntime"))
    db_session.add(WebhookDelivery(
        job_id=other, delivery_id=uuid.uuid4(), event="job.failed", attempt=1,
        url="https://hooks.example/x", status_code=404, error="the receiver answered 404",
        duration_ms=5.0, final=True))
    db_session.commit()

    samples = scrape(metrics_client)

    assert value(empty, "fuseforge_webhook_deliveries", outcome="delivered") == 0
    assert value(samples, "fuseforge_webhook_deliveries", outcome="delivered") == 1
    assert value(samples, "fuseforge_webhook_deliveries", outcome="retried") == 2
    assert value(samples, "fuseforge_webhook_deliveries", outcome="failed") == 1
    assert value(samples, "fuseforge_queue_depth", queue="webhooks") == 0
