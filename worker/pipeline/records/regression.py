"""Regression detection: a job's engine that gains less over the original, timed beside it in
the same run, than the best earlier engine of the same model, shipped configuration and
environment did, beyond both speed-ups' confidence intervals.

Judged when the job's records are stored, in the transaction that marks it succeeded, so a
job is never seen succeeded without its verdict. Only the comparison suite's engine record is
judged, against the engine records of the model's other succeeded jobs with the same
`config_key` (what shipped: worker/pipeline/records/benchmark_keys.py) and `environment_key`
(where it was measured).

Raw latencies are not compared: each job times the original and the engine side by side, round
after round, so their ratio (`speedup_vs_reference`, with its bootstrap interval) cancels what
the host was doing at the time. A host that got slower overall slows both and flags nothing; an
engine that really got worse lowers the ratio. The highest earlier speed-up is the one to beat:
its interval's bottom must lie above this record's interval's top. Overlapping intervals are
noise, not a regression, and a record without an interval (or a best earlier one without) is
not judged. Nor is a job that shipped the user's original model (`JobOutcome.original_shipped`):
what it delivers is no slower than the original.
"""

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import job_state
from core.db.models import BenchmarkRecord, BenchmarkSuite, BenchmarkVariant, Job, JobStatus

__all__ = ["JUDGED_SUITE", "JUDGED_VARIANT", "flag_regression", "regression_of"]

logger = logging.getLogger(__name__)

JUDGED_SUITE, JUDGED_VARIANT = BenchmarkSuite.COMPARISON, BenchmarkVariant.ENGINE
_STAGE = "benchmark"


def regression_of(speedup: float, ci: tuple[float, float], *, against_job: uuid.UUID,
                  against_speedup: float, against_ci: tuple[float, float],
                  latency: float | None = None,
                  against_latency: float | None = None) -> dict[str, Any] | None:
    """The regression figures when the speed-up interval `ci` lies wholly below `against_ci`
    (the earlier job's, each over the original timed in its own run); None otherwise.
    `latency` and `against_latency` (the engines' medians, ms) are kept for reading only."""
    if ci[1] >= against_ci[0]:
        return None
    slowdown = against_speedup / speedup
    detail = (f"engine {speedup:.2f}× the original's speed ({ci[0]:.2f}–{ci[1]:.2f}) vs "
              f"{against_speedup:.2f}× ({against_ci[0]:.2f}–{against_ci[1]:.2f}) in job "
              f"{against_job}, each against the original timed in its own run: "
              f"{slowdown:.2f}× slower")
    return {"against_job": str(against_job), "speedup": speedup, "speedup_ci": list(ci),
            "against_speedup": against_speedup, "against_speedup_ci": list(against_ci),
            "latency_ms_p50": latency, "against_latency_ms_p50": against_latency,
            "slowdown": slowdown, "detail": detail}


def flag_regression(session: Session, job_id: uuid.UUID,
                    records: Iterable[BenchmarkRecord]) -> dict[str, Any] | None:
    """Judge the job's new engine record (keyed, not yet added) against the model's history;
    a regression is set on the record, recorded as a job event and logged, and returned."""
    engine = next((r for r in records
                   if r.suite == JUDGED_SUITE and r.variant == JUDGED_VARIANT), None)
    if (engine is None or engine.config_key is None or engine.speedup_vs_reference is None
            or engine.speedup_ci_low is None or engine.speedup_ci_high is None):
        return None
    model_id = select(Job.model_id).where(Job.id == job_id).scalar_subquery()
    best = session.execute(
        select(BenchmarkRecord.job_id, BenchmarkRecord.speedup_vs_reference,
               BenchmarkRecord.speedup_ci_low, BenchmarkRecord.speedup_ci_high,
               BenchmarkRecord.latency_ms_p50)
        .join(Job, Job.id == BenchmarkRecord.job_id)
        .where(Job.model_id == model_id, Job.id != job_id,
               Job.status == JobStatus.SUCCEEDED.value,
               BenchmarkRecord.suite == JUDGED_SUITE,
               BenchmarkRecord.variant == JUDGED_VARIANT,
               BenchmarkRecord.config_key == engine.config_key,
               # records that never knew their environment compare only with each other
               BenchmarkRecord.environment_key.is_not_distinct_from(engine.environment_key),
               BenchmarkRecord.speedup_vs_reference.is_not(None),
               BenchmarkRecord.speedup_ci_low.is_not(None),
               BenchmarkRecord.speedup_ci_high.is_not(None))
        .order_by(BenchmarkRecord.speedup_vs_reference.desc(), BenchmarkRecord.id)
        .limit(1)).one_or_none()
    if best is None:
        return None
    regression = regression_of(
        engine.speedup_vs_reference, (engine.speedup_ci_low, engine.speedup_ci_high),
        against_job=best.job_id, against_speedup=best.speedup_vs_reference,
        against_ci=(best.speedup_ci_low, best.speedup_ci_high),
        latency=engine.latency_ms_p50, against_latency=best.latency_ms_p50)
    if regression is None:
        return None
    engine.regression = regression
    message = f"regression: {regression['detail']}"
    job_state.record_event(session, job_id, message, stage=_STAGE)
    logger.warning("job %s: %s", job_id, message)
    return regression
