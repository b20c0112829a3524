"""The webhook body carries the engine benchmark's verdicts (its speed-up's and a regression)
and the job's outcome with its headline."""

from __future__ import annotations

import json
import uuid

from sqlalchemy.orm import Session

from core.db.models import DEFAULT_PROJECT_ID, BenchmarkRecord, Job, JobStatus, Model
from core.job_config import JobConfig
from core.outcome import job_outcome
from core.webhooks.payload import job_payload

REGRESSION = {"against_job": str(uuid.uuid4()), "slowdown": 1.29, "detail": "1.29× slower"}


def _job(session: Session) -> Job:
    model = Model(project_id=DEFAULT_PROJECT_ID, name="m", sha256=uuid.uuid4().hex * 2,
                  size_bytes=1, storage_uri="store://m", ir_version=8, opset=17,
                  producer="test", inputs=[], outputs=[])
    job = Job(project_id=DEFAULT_PROJECT_ID, model=model,
              config=JobConfig().model_dump(mode="json"), status=JobStatus.SUCCEEDED.value)
    session.add(job)
    session.flush()
    return job


def _record(job: Job, variant: str, verdict: str | None,
            regression: dict[str, object] | None) -> BenchmarkRecord:
    return BenchmarkRecord(job_id=job.id, suite="comparison", variant=variant,
                           backend="onnxruntime", batch_size=1, iterations=30, warmup=5,
                           latency_ms_p50=1.0, latency_ms_p90=1.0, latency_ms_p99=1.0,
                           latency_ms_mean=1.0, throughput_per_s=1000.0,
                           speedup_verdict=verdict, regression=regression)


def test_payload_carries_the_engines_verdict_and_regression(db_session: Session) -> None:
    job = _job(db_session)
    db_session.add_all([_record(job, "original", None, None),
                        _record(job, "engine", "faster", REGRESSION)])
    db_session.flush()
    sent = json.loads(job_payload(db_session, job))
    assert sent["speedup_verdict"] == "faster"
    assert sent["regression"] == REGRESSION


def test_payload_carries_the_jobs_outcome_and_headline(db_session: Session) -> None:
    job = _job(db_session)
    job.outcome = job_outcome(config=job.config, status="succeeded",
                              original_shipped="nothing beat it").model_dump(mode="json")
    db_session.flush()

    sent = json.loads(job_payload(db_session, job))

    assert sent["outcome"] == job.outcome
    assert sent["outcome"]["headline"] == ("Shipped your original model unchanged (onnxruntime "
                                           "fp32 asked): nothing beat it.")


def test_payload_of_a_job_never_benchmarked_has_neither(db_session: Session) -> None:
    sent = json.loads(job_payload(db_session, _job(db_session)))
    assert sent["speedup_verdict"] is None and sent["regression"] is None
