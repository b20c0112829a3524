"""A finished job's rows written straight to the database (benchmark records, validation
verdicts, the `succeeded` move), for tests of how lists and streams read them back."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import BenchmarkRecord, Job, ValidationResult
from core.outcome import job_outcome

__all__ = ["benchmark", "finish", "verdict"]


def benchmark(job_id: uuid.UUID, variant: str, speedup: float | None,
              suite: str = "comparison") -> BenchmarkRecord:
    """A 1 ms onnxruntime timing of `variant`, `speedup` times the reference."""
    return BenchmarkRecord(job_id=job_id, suite=suite, variant=variant, backend="onnxruntime",
                           batch_size=1, iterations=30, warmup=5, latency_ms_p50=1.0,
                           latency_ms_p90=1.0, latency_ms_p99=1.0, latency_ms_mean=1.0,
                           throughput_per_s=1000.0, speedup_vs_reference=speedup)


def verdict(job_id: uuid.UUID, output: str, passed: bool) -> ValidationResult:
    """Output `output`'s validation verdict, `passed` or not."""
    return ValidationResult(job_id=job_id, output_name=output, samples=4, max_abs_err=0.0,
                            max_rel_err=0.0, mean_abs_err=0.0, cosine_similarity=1.0, atol=1e-4,
                            rtol=1e-3, min_cosine=0.999, passed=passed)


def finish(db_session: Session, job_id: str, *, speedup: float, passed: list[bool],
           took: timedelta) -> None:
    """End the job as the worker does: records committed with `succeeded` and its outcome,
    timed `took`."""
    key = uuid.UUID(job_id)
    assert job_state.claim(db_session, key, "celery@test") is not None
    db_session.add_all([
        benchmark(key, "original", None), benchmark(key, "engine", speedup),
        # an ablation stage is no headline, whatever its name
        benchmark(key, "engine", speedup * 2, suite="ablation"),
        *(verdict(key, f"out{i}", ok) for i, ok in enumerate(passed)),
    ])
    assert job_state.succeed(db_session, key) is not None
    job = db_session.get_one(Job, key)
    assert job.finished_at is not None
    job.started_at = job.finished_at - took
    job.outcome = job_outcome(
        config=job.config, status="succeeded", engine_record={"speedup_vs_reference": speedup},
        validation={"passed": all(passed), "outputs": [
            {"name": f"out{i}", "cosine_similarity": 1.0} for i in range(len(passed))]},
    ).model_dump(mode="json")
    db_session.commit()
