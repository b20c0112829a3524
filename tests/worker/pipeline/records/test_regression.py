"""Regression detection where a job's records are stored: `JobRecorder.succeed`, the code path
every job run ends in (tests/support/finished_jobs.py), on the real databases. An earlier
engine record of the same model, configuration and environment is planted directly; the later
job goes through the recorder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, BenchmarkRecord, Job, JobEvent, JobStatus, Model
from core.db.types import utc_now
from core.job_config import JobConfig
from tests.support.finished_jobs import finish_with_engine_timing, timed
from worker.pipeline.records.benchmark_keys import config_key
from worker.pipeline.records.regression import regression_of

CONFIG = JobConfig(input_shapes={"x": [4, 8]})


@pytest.fixture
def sessions(db_session: Session) -> sessionmaker[Session]:
    """Sessions whose transactions are savepoints of the test's rolled-back one."""
    return sessionmaker(bind=db_session.connection(), join_transaction_mode="create_savepoint",
                        expire_on_commit=False)


@pytest.fixture
def model_id(db_session: Session) -> Iterator[uuid.UUID]:
    model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                  size_bytes=1, storage_uri="store://m", ir_version=8, opset=17,
                  producer="test", inputs=[], outputs=[])
    db_session.add(model)
    db_session.flush()
    yield model.id


def _job(session: Session, model_id: uuid.UUID, status: JobStatus, minutes_ago: int,
         config: JobConfig = CONFIG) -> uuid.UUID:
    job = Job(project_id=DEFAULT_PROJECT_ID, model_id=model_id,
              config=config.model_dump(mode="json"), status=status.value,
              created_at=utc_now() - timedelta(minutes=minutes_ago))
    session.add(job)
    session.flush()
    return job.id


def _run(sessions: sessionmaker[Session], db_session: Session, model_id: uuid.UUID,
         engine_p50: float, engine_ci: tuple[float, float] | None,
         config: JobConfig = CONFIG) -> BenchmarkRecord:
    """A job stored as a run stores it: claimed, then its outcome committed by the recorder;
    its engine record as stored."""
    job_id = _job(db_session, model_id, JobStatus.QUEUED, 1, config)
    finish_with_engine_timing(sessions, job_id, engine_p50, engine_ci, batch_size=4)
    db_session.expire_all()
    return db_session.scalars(select(BenchmarkRecord).where(
        BenchmarkRecord.job_id == job_id, BenchmarkRecord.variant == "engine")).one()


def _plant(db_session: Session, model_id: uuid.UUID, like: BenchmarkRecord, p50: float,
           ci: tuple[float, float], environment_key: str | None = None,
           status: JobStatus = JobStatus.SUCCEEDED) -> uuid.UUID:
    """An earlier job's engine record with `like`'s configuration and environment keys."""
    job_id = _job(db_session, model_id, status, 60)
    db_session.add(BenchmarkRecord(
        job_id=job_id, suite="comparison", **timed("engine", p50, ci, batch_size=4).to_dict(),
        config_key=like.config_key,
        environment_key=environment_key if environment_key is not None else like.environment_key))
    db_session.flush()
    return job_id


def _events(db_session: Session, job_id: uuid.UUID) -> list[str]:
    return list(db_session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)))


def test_records_are_keyed_by_the_jobs_configuration(sessions: sessionmaker[Session],
                                                      db_session: Session,
                                                      model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1))
    assert first.config_key == config_key(CONFIG, suite="comparison", variant="engine",
                                          batch_size=4)
    assert len(first.config_key) == 16
    original = db_session.scalars(select(BenchmarkRecord).where(
        BenchmarkRecord.job_id == first.job_id, BenchmarkRecord.variant == "original")).one()
    assert original.config_key is not None and original.config_key != first.config_key


def test_slower_engine_than_an_earlier_job_is_flagged(sessions: sessionmaker[Session],
                                                       db_session: Session,
                                                       model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.98, 3.22))
    assert first.regression is None  # nothing earlier to compare with
    earlier = _plant(db_session, model_id, first, 2.4, (2.35, 2.46))
    later = _run(sessions, db_session, model_id, 3.1, (2.98, 3.22))
    assert later.regression is not None
    assert later.regression["against_job"] == str(earlier)  # the fastest earlier, not `first`
    assert later.regression["against_latency_ms_p50"] == 2.4
    assert later.regression["against_ci"] == [2.35, 2.46]
    assert later.regression["ci"] == [2.98, 3.22]
    assert later.regression["slowdown"] == pytest.approx(3.1 / 2.4)
    assert later.regression["detail"] == (
        f"engine p50 3.10 ms (2.98–3.22) vs 2.40 ms (2.35–2.46) in job {earlier}: 1.29× slower")
    assert any(m.startswith("regression: engine p50 3.10 ms")
               for m in _events(db_session, later.job_id))


def test_faster_or_overlapping_engine_is_not_flagged(sessions: sessionmaker[Session],
                                                      db_session: Session,
                                                      model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1))
    _plant(db_session, model_id, first, 2.4, (2.35, 2.46))
    overlapping = _run(sessions, db_session, model_id, 2.5, (2.44, 2.56))
    faster = _run(sessions, db_session, model_id, 1.5, (1.45, 1.55))
    assert faster.regression is None
    assert overlapping.regression is None
    assert not any(m.startswith("regression") for m in _events(db_session, faster.job_id))


def test_other_environment_or_configuration_is_not_compared(sessions: sessionmaker[Session],
                                                             db_session: Session,
                                                             model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1))
    _plant(db_session, model_id, first, 1.0, (0.95, 1.05), environment_key="0" * 16)
    _plant(db_session, model_id, first, 1.0, (0.95, 1.05), status=JobStatus.FAILED)
    assert _run(sessions, db_session, model_id, 3.0, (2.9, 3.1)).regression is None
    fp16 = CONFIG.model_copy(update={"precision": "fp16"})
    # the fp16 job's key differs: the fp32 jobs' faster engines are not its history
    assert _run(sessions, db_session, model_id, 9.0, (8.9, 9.1), config=fp16).regression is None


def test_missing_intervals_are_not_judged(sessions: sessionmaker[Session], db_session: Session,
                                          model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1))
    _plant(db_session, model_id, first, 1.0, (0.95, 1.05))
    assert _run(sessions, db_session, model_id, 3.0, None).regression is None


def test_regression_of_needs_the_intervals_apart() -> None:
    job = uuid.uuid4()
    assert regression_of(3.0, (2.5, 3.5), against_job=job, against_latency=2.4,
                         against_ci=(2.3, 2.5)) is None  # touching: not beyond both
    flagged = regression_of(3.0, (2.6, 3.5), against_job=job, against_latency=2.4,
                            against_ci=(2.3, 2.5))
    assert flagged is not None and flagged["slowdown"] == pytest.approx(1.25)
