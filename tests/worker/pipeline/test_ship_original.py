"""slower_than_original: which benchmark verdicts keep an engine from shipping, and the why."""

from __future__ import annotations

from dataclasses import replace

from optimizer.measure.benchmark import BenchmarkResult
from worker.pipeline.ship_original import MIN_ROUNDS, slower_than_original

_ORIGINAL = BenchmarkResult(
    variant="original", backend="onnxruntime", batch_size=1, iterations=30, warmup=5,
    latency_ms_p50=10.0, latency_ms_p90=11.0, latency_ms_p99=12.0, latency_ms_mean=10.2,
    throughput_per_s=98.0, peak_memory_mb=None, speedup_vs_reference=None)
_ENGINE = replace(_ORIGINAL, variant="engine", latency_ms_p50=12.2, speedup_vs_reference=0.82,
                  speedup_ci_low=0.78, speedup_ci_high=0.86, speedup_verdict="slower")


def test_an_engine_measured_slower_says_how_much_slower() -> None:
    assert slower_than_original([_ORIGINAL, _ENGINE]) == (
        "the engine measured 0.82x the original's speed (0.78-0.86)")


def test_a_tie_or_a_faster_engine_ships() -> None:
    for verdict in ("no measurable difference", "faster", None):
        assert slower_than_original([_ORIGINAL, replace(_ENGINE, speedup_verdict=verdict)]) is None


def test_a_slower_verdict_from_too_few_rounds_does_not_replace_the_engine() -> None:
    thin = replace(_ENGINE, iterations=MIN_ROUNDS - 1)

    assert slower_than_original([_ORIGINAL, thin]) is None
    assert slower_than_original([_ORIGINAL, replace(thin, iterations=MIN_ROUNDS)]) is not None


def test_only_the_engine_variant_is_judged() -> None:
    unoptimized = replace(_ENGINE, variant="original_unoptimized")

    assert slower_than_original([_ORIGINAL, unoptimized]) is None
