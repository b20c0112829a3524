"""Regression detection where a job's records are stored: `JobRecorder.succeed`, the code path
every job run ends in (tests/support/finished_jobs.py), on the real databases. An earlier
engine record of the same model, shipped configuration and environment is planted directly, or
an earlier job goes through the recorder as the later one does.

What is judged is each job's speed-up over the original timed in its own run, not raw latency:
the incident behind these tests was an int8-dynamic job that shipped fp32 flagged "3.79x
slower" than an int8-static job that shipped int8, on a host whose own original had gone from
16 to 31 ms between the two."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import DEFAULT_PROJECT_ID, BenchmarkRecord, Job, JobEvent, JobStatus, Model
from core.db.types import utc_now
from core.job_config import JobConfig
from tests.support.finished_jobs import ORIGINAL_P50, finish_with_engine_timing, timed
from worker.pipeline.records.benchmark_keys import config_key
from worker.pipeline.records.regression import regression_of

CONFIG = JobConfig(input_shapes={"x": [4, 8]})
INT8_AUTO = JobConfig.model_validate(
    {**CONFIG.model_dump(mode="json"), "precision": "int8", "quantization": {"mode": "auto"}})
INT8_DYNAMIC = JobConfig.model_validate(
    {**CONFIG.model_dump(mode="json"), "precision": "int8", "quantization": {"mode": "dynamic"}})
SHIPPED_INT8 = {"shipped": "int8", "why": "int8 was faster within the budget",
                "chosen": {"mode": "dynamic", "flavour": "qdq", "method": None, "label": "dynamic"}}
SHIPPED_FP32 = {"shipped": "fp32", "why": "the quantizer found no MatMul/Conv to quantize",
                "chosen": None}


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
         config: JobConfig = CONFIG, original_p50: float = ORIGINAL_P50,
         quantization: dict[str, Any] | None = None,
         original_shipped: str | None = None) -> BenchmarkRecord:
    """A job stored as a run stores it: claimed, then its outcome committed by the recorder;
    its engine record as stored."""
    job_id = _job(db_session, model_id, JobStatus.QUEUED, 1, config)
    finish_with_engine_timing(sessions, job_id, engine_p50, engine_ci, batch_size=4,
                              original_p50=original_p50, quantization=quantization,
                              original_shipped=original_shipped)
    db_session.expire_all()
    return db_session.scalars(select(BenchmarkRecord).where(
        BenchmarkRecord.job_id == job_id, BenchmarkRecord.variant == "engine")).one()


def _plant(db_session: Session, model_id: uuid.UUID, like: BenchmarkRecord, p50: float,
           ci: tuple[float, float], environment_key: str | None = None,
           status: JobStatus = JobStatus.SUCCEEDED) -> uuid.UUID:
    """An earlier job's engine record with `like`'s configuration and environment keys, timed
    beside an original of 5 ms."""
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


def test_records_are_keyed_by_what_shipped_not_what_was_asked(
        sessions: sessionmaker[Session], db_session: Session, model_id: uuid.UUID) -> None:
    fp32 = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1))
    int8_shipped_fp32 = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1),
                             config=INT8_DYNAMIC, quantization=SHIPPED_FP32)
    int8_shipped_int8 = _run(sessions, db_session, model_id, 3.0, (2.9, 3.1),
                             config=INT8_AUTO, quantization=SHIPPED_INT8)
    # int8 asked, fp32 shipped: the same measurement as an fp32 job's, whatever mode was asked
    assert int8_shipped_fp32.config_key == fp32.config_key
    assert int8_shipped_int8.config_key != fp32.config_key


def test_slower_engine_than_an_earlier_job_is_flagged(sessions: sessionmaker[Session],
                                                       db_session: Session,
                                                       model_id: uuid.UUID) -> None:
    first = _run(sessions, db_session, model_id, 3.0, (2.98, 3.22))
    assert first.regression is None  # nothing earlier to compare with
    earlier = _plant(db_session, model_id, first, 2.4, (2.35, 2.46))
    later = _run(sessions, db_session, model_id, 3.1, (2.98, 3.22))
    assert later.regression is not None
    assert later.regression["against_job"] == str(earlier)  # the best earlier, not `first`
    assert later.regression["against_speedup"] == pytest.approx(5 / 2.4)
    assert later.regression["against_speedup_ci"] == pytest.approx([5 / 2.46, 5 / 2.35])
    assert later.regression["speedup_ci"] == pytest.approx([5 / 3.22, 5 / 2.98])
    assert later.regression["slowdown"] == pytest.approx(3.1 / 2.4)
    assert later.regression["latency_ms_p50"] == 3.1
    assert later.regression["against_latency_ms_p50"] == 2.4
    assert later.regression["detail"] == (
        f"engine 1.61× the original's speed (1.55–1.68) vs 2.08× (2.03–2.13) in job {earlier}, "
        "each against the original timed in its own run: 1.29× slower")
    assert any(m.startswith("regression: engine 1.61× the original's speed")
               for m in _events(db_session, later.job_id))


def test_no_flag_across_a_configuration_change(sessions: sessionmaker[Session],
                                               db_session: Session,
                                               model_id: uuid.UUID) -> None:
    """The incident: an int8 job that shipped int8 (4x the original's speed), then an
    int8-dynamic one that shipped fp32 (no faster than the original). Different shipped
    configurations: neither is the other's history."""
    quantized = _run(sessions, db_session, model_id, 1.25, (1.24, 1.26), config=INT8_AUTO,
                     quantization=SHIPPED_INT8)
    dynamic = _run(sessions, db_session, model_id, 5.0, (4.95, 5.05), config=INT8_DYNAMIC,
                   quantization=SHIPPED_FP32)
    assert quantized.config_key != dynamic.config_key
    assert dynamic.regression is None
    assert not any(m.startswith("regression") for m in _events(db_session, dynamic.job_id))


def test_no_flag_when_the_original_got_slower_with_the_engine(sessions: sessionmaker[Session],
                                                              db_session: Session,
                                                              model_id: uuid.UUID) -> None:
    """A busier host: the original went from 16 to 31 ms and the engine with it. Its latency
    interval lies far above the earlier one's; its speed-up over its own original does not."""
    quiet = _run(sessions, db_session, model_id, 8.0, (7.9, 8.1), original_p50=16.0)
    busy = _run(sessions, db_session, model_id, 15.6, (15.4, 15.8), original_p50=31.0)
    assert quiet.config_key == busy.config_key and busy.latency_ms_p50_ci_low > 8.1
    assert busy.regression is None


def test_flag_when_the_speedup_fell_beyond_both_intervals(sessions: sessionmaker[Session],
                                                          db_session: Session,
                                                          model_id: uuid.UUID) -> None:
    """The engine's latency went up while its original stayed: the ratio got worse."""
    before = _run(sessions, db_session, model_id, 8.0, (7.9, 8.1), original_p50=16.0)
    after = _run(sessions, db_session, model_id, 12.0, (11.8, 12.2), original_p50=16.0)
    assert after.regression is not None
    assert after.regression["against_job"] == str(before.job_id)
    assert after.regression["slowdown"] == pytest.approx(1.5)


def test_a_job_that_shipped_the_original_is_not_flagged(sessions: sessionmaker[Session],
                                                        db_session: Session,
                                                        model_id: uuid.UUID) -> None:
    """Its engine lost to the user's own model, which shipped: nothing the user got is slower."""
    _run(sessions, db_session, model_id, 8.0, (7.9, 8.1), original_p50=16.0)
    lost = _run(sessions, db_session, model_id, 17.0, (16.8, 17.2), original_p50=16.0,
                original_shipped="no variant beat the original")
    assert lost.regression is None


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
    assert regression_of(2.0, (1.8, 2.5), against_job=job, against_speedup=2.6,
                         against_ci=(2.5, 2.7)) is None  # touching: not beyond both
    flagged = regression_of(2.0, (1.8, 2.4), against_job=job, against_speedup=2.5,
                            against_ci=(2.45, 2.7))
    assert flagged is not None and flagged["slowdown"] == pytest.approx(1.25)
