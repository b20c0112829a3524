"""Finishing a queued job as a worker's last step does (`JobRecorder.succeed`, where benchmark
records are keyed and regressions judged) with timings a test chooses: for tests of what
clients make of a flagged regression, which no real timing produces on demand."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session, sessionmaker

from core.reports import AccuracyReport, JobReports
from optimizer.measure.benchmark import BenchmarkResult
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import JobOutcome

__all__ = ["ORIGINAL_P50", "finish_with_engine_timing", "timed"]

ORIGINAL_P50 = 5.0


def timed(variant: str, p50: float, ci: tuple[float, float] | None, *,
          batch_size: int = 1, original_p50: float = ORIGINAL_P50) -> BenchmarkResult:
    """A benchmark result of `variant` with median `p50` ms and its interval `ci`; an engine's
    speed-up is `original_p50` / `p50`, its interval the original's median over `ci`'s ends."""
    engine = variant != "original"
    return BenchmarkResult(
        variant=variant, backend="onnxruntime", batch_size=batch_size, iterations=30, warmup=5,
        latency_ms_p50=p50, latency_ms_p90=p50 * 1.1, latency_ms_p99=p50 * 1.2,
        latency_ms_mean=p50, throughput_per_s=batch_size * 1000 / p50, peak_memory_mb=None,
        speedup_vs_reference=original_p50 / p50 if engine else None,
        speedup_ci_low=original_p50 / ci[1] if engine and ci else None,
        speedup_ci_high=original_p50 / ci[0] if engine and ci else None,
        latency_ms_p50_ci_low=ci[0] if ci else None, latency_ms_p50_ci_high=ci[1] if ci else None)


def finish_with_engine_timing(sessions: sessionmaker[Session], job_id: uuid.UUID,
                              engine_p50: float, engine_ci: tuple[float, float] | None, *,
                              batch_size: int = 1, original_p50: float = ORIGINAL_P50,
                              quantization: dict[str, object] | None = None,
                              original_shipped: str | None = None) -> None:
    """Claim the queued job and store its outcome: the original at `original_p50` ms (2%
    interval), the engine as given; `quantization`: the accuracy report's quantization section
    (what shipped: `{"shipped": "fp32", ...}` for an int8 job that shipped fp32);
    `original_shipped`: why the job shipped the user's original instead of its engine."""
    recorder = JobRecorder(job_id, sessions)
    assert recorder.claim("test-worker") is not None, f"job {job_id} is not queued"
    reports = JobReports()
    if quantization is not None:
        reports.accuracy_report = AccuracyReport(quantization=dict(quantization))
    original_ci = (original_p50 * 0.98, original_p50 * 1.02)
    outcome = JobOutcome(reports=reports, original_shipped=original_shipped, benchmarks=[
        timed("original", original_p50, original_ci, batch_size=batch_size),
        timed("engine", engine_p50, engine_ci, batch_size=batch_size, original_p50=original_p50)])
    assert recorder.succeed(outcome, stored=[]), f"job {job_id} was not running"
