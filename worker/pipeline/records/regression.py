"""Regression detection: a job's engine slower than the best earlier engine of the same model,
configuration and environment, beyond both median latencies' confidence intervals.

Judged when the job's records are stored, in the transaction that marks it succeeded, so a
job is never seen succeeded without its verdict. Only the comparison suite's engine record is
judged, against the engine records of the model's other succeeded jobs with the same
`config_key` (worker/pipeline/records/benchmark_keys.py) and `environment_key` (where it was measured);
the fastest of those by median is the one to beat. Its interval's top must lie below this
record's interval's bottom: overlapping intervals are noise, not a regression, and a record
without an interval (or a fastest earlier one without) is not judged.
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


def regression_of(latency: float, ci: tuple[float, float], *, against_job: uuid.UUID,
                  against_latency: float, against_ci: tuple[float, float]) -> dict[str, Any] | None:
    """The regression figures when `ci` lies wholly above `against_ci`; None otherwise."""
    if ci[0] <= against_ci[1]:
        return None
    slowdown = latency / against_latency
    detail = (f"engine p50 {latency:.2f} ms ({ci[0]:.2f}–{ci[1]:.2f}) vs {against_latency:.2f} ms "
              f"({against_ci[0]:.2f}–{against_ci[1]:.2f}) in job {against_job}: "
              f"{slowdown:.2f}× slower")
    return {"against_job": str(against_job), "against_latency_ms_p50": against_latency,
            "against_ci": list(against_ci), "latency_ms_p50": latency, "ci": list(ci),
            "slowdown": slowdown, "detail": detail}


def flag_regression(session: Session, job_id: uuid.UUID,
                    records: Iterable[BenchmarkRecord]) -> dict[str, Any] | None:
    """Judge the job's new engine record (keyed, not yet added) against the model's history;
    a regression is set on the record, recorded as a job event and logged, and returned."""
    engine = next((r for r in records
                   if r.suite == JUDGED_SUITE and r.variant == JUDGED_VARIANT), None)
    if (engine is None or engine.config_key is None or engine.latency_ms_p50_ci_low is None
            or engine.latency_ms_p50_ci_high is None):
        return None
    model_id = select(Job.model_id).where(Job.id == job_id).scalar_subquery()
    best = session.execute(
        select(BenchmarkRecord.job_id, BenchmarkRecord.latency_ms_p50,
               BenchmarkRecord.latency_ms_p50_ci_low, BenchmarkRecord.latency_ms_p50_ci_high)
        .join(Job, Job.id == BenchmarkRecord.job_id)
        .where(Job.model_id == model_id, Job.id != job_id,
               Job.status == JobStatus.SUCCEEDED.value,
               BenchmarkRecord.suite == JUDGED_SUITE,
               BenchmarkRecord.variant == JUDGED_VARIANT,
               BenchmarkRecord.config_key == engine.config_key,
               # records that never knew their environment compare only with each other
               BenchmarkRecord.environment_key.is_not_distinct_from(engine.environment_key),
               BenchmarkRecord.latency_ms_p50_ci_low.is_not(None),
               BenchmarkRecord.latency_ms_p50_ci_high.is_not(None))
        .order_by(BenchmarkRecord.latency_ms_p50, BenchmarkRecord.id)
        .limit(1)).one_or_none()
    if best is None:
        return None
    regression = regression_of(
        engine.latency_ms_p50, (engine.latency_ms_p50_ci_low, engine.latency_ms_p50_ci_high),
        against_job=best.job_id, against_latency=best.latency_ms_p50,
        against_ci=(best.latency_ms_p50_ci_low, best.latency_ms_p50_ci_high))
    if regression is None:
        return None
    engine.regression = regression
    message = f"regression: {regression['detail']}"
    job_state.record_event(session, job_id, message, stage=_STAGE)
    logger.warning("job %s: %s", job_id, message)
    return regression
