"""benchmark_stats and the statistics benchmark_interleaved records: intervals that hold the
truth, verdicts that follow them, and a warm-up that stops once timings settle."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Self

import numpy as np
import pytest

from optimizer.backends.runner import RunnerSpec
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.measure.stats import (
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    bootstrap_median_ci,
    coefficient_of_variation,
    round_significant,
    speedup_verdict,
)
from optimizer.model.tensor_specs import TensorSpec

FEEDS = {"input": np.zeros((1, 4), np.float32)}


class ScriptedRunner:
    """A device-timed runner whose runs take the milliseconds `times` gives, in order (then the
    last one forever): timings under the test's control, not the machine's."""

    timing_clock = "scripted_clock"
    device_bytes_in_use = 0

    def __init__(self, times: Iterable[float]) -> None:
        self._times = iter(times)
        self._last = 1.0
        self.runs = 0

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return (TensorSpec("input", "float32", (1, 4)),)

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("y",)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.zeros(1)}

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]:
        out = []
        for _ in range(warmup + iterations):
            self._last = next(self._times, self._last)
            self.runs += 1
            out.append(self._last)
        return tuple(out[warmup:])

    def spec(self) -> RunnerSpec:
        return RunnerSpec(backend="scripted", model_path="/nonexistent/model.onnx")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        pass


def _options(**overrides: object) -> BenchmarkOptions:
    settings: dict = {"warmup": 2, "iterations": 30, "measure_memory": False}
    settings.update(overrides)
    return BenchmarkOptions(**settings)


def test_bootstrap_interval_of_the_median_holds_the_true_median():
    rng = np.random.default_rng(1)
    held = 0
    for _ in range(40):
        samples = rng.lognormal(mean=np.log(10.0), sigma=0.2, size=30)  # true median 10.0
        low, high = bootstrap_median_ci(samples, np.random.default_rng(0))
        held += low <= 10.0 <= high
        assert low <= float(np.median(samples)) <= high
    assert held >= 34  # a 95% interval: ~38 of 40 expected, 34 leaves room for chance


def test_bootstrap_is_reproducible_with_the_same_seed():
    samples = np.random.default_rng(3).normal(5.0, 1.0, size=30)
    first = bootstrap_median_ci(samples, np.random.default_rng(7))
    assert bootstrap_median_ci(samples, np.random.default_rng(7)) == first


def test_bootstrap_refuses_no_samples():
    with pytest.raises(ValueError, match="0 samples"):
        bootstrap_median_ci([], np.random.default_rng(0))


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (1.02, 1.10, FASTER), (0.80, 0.95, SLOWER), (0.97, 1.04, NO_DIFFERENCE),
    (1.0, 1.0, NO_DIFFERENCE),
    # surely measured but under 1%: a tie
    (1.004, 1.008, NO_DIFFERENCE), (0.992, 0.996, NO_DIFFERENCE),
])
def test_speedup_verdict_follows_the_interval(low, high, verdict):
    assert speedup_verdict(low, high) == verdict


def test_round_significant_keeps_four_digits():
    assert round_significant(1.234567) == 1.235
    assert round_significant(0.000123456) == 0.0001235
    assert round_significant(98765.4) == 98770
    assert round_significant(0.0) == 0.0


def test_coefficient_of_variation_of_steady_and_noisy_runs():
    assert coefficient_of_variation([2.0] * 5) == 0.0
    assert coefficient_of_variation([1.0, 3.0] * 3) == pytest.approx(0.5)


def test_identical_timings_make_no_measurable_difference():
    variants = {"original": ScriptedRunner(itertools.repeat(2.0)),
                "engine": ScriptedRunner(itertools.repeat(2.0))}

    _, engine = benchmark_interleaved(variants, FEEDS, _options(), reference="original",
                                      batch_size=1)

    assert engine.speedup_ci_low == engine.speedup_ci_high == 1.0
    assert engine.speedup_verdict == NO_DIFFERENCE


def test_a_clearly_faster_engine_is_faster_with_an_interval_near_the_truth():
    rng = np.random.default_rng(5)
    variants = {"original": ScriptedRunner(rng.normal(4.0, 0.2, size=500)),
                "engine": ScriptedRunner(rng.normal(2.0, 0.1, size=500))}

    original, engine = benchmark_interleaved(variants, FEEDS, _options(),
                                             reference="original", batch_size=1)

    assert engine.speedup_verdict == FASTER
    assert engine.speedup_ci_low is not None and engine.speedup_ci_high is not None
    # near the true 2.0x (how often an interval holds the truth: the first test)
    assert 1.8 < engine.speedup_ci_low <= engine.speedup_vs_reference <= engine.speedup_ci_high < 2.2
    low, high = original.latency_ms_p50_ci_low, original.latency_ms_p50_ci_high
    assert low is not None and high is not None
    assert 3.8 < low <= original.latency_ms_p50 <= high < 4.2


def test_a_clearly_slower_engine_is_slower():
    rng = np.random.default_rng(6)
    variants = {"original": ScriptedRunner(rng.normal(2.0, 0.1, size=500)),
                "engine": ScriptedRunner(rng.normal(3.0, 0.1, size=500))}

    _, engine = benchmark_interleaved(variants, FEEDS, _options(), reference="original",
                                      batch_size=1)

    assert engine.speedup_verdict == SLOWER


def test_warm_up_stops_once_timings_settle():
    # cold runs first, then steady: stable after the window of 5 steady runs
    steady = ScriptedRunner([50.0, 20.0, 8.0, 1.0, 1.0, 1.0, 1.0, 1.0, *[1.0] * 100])

    (result,) = benchmark_interleaved({"engine": steady}, FEEDS, _options(max_warmup=50),
                                      reference="engine", batch_size=1)

    assert result.warmup_stable is True
    assert result.warmup == 8  # 3 cold runs, then a window of 5 steady ones
    assert result.warmup_cv == 0.0
    assert result.latencies_ms == [1.0] * 30


def test_warm_up_never_stops_before_the_configured_minimum():
    steady = ScriptedRunner(itertools.repeat(1.0))

    (result,) = benchmark_interleaved({"engine": steady}, FEEDS, _options(warmup=12),
                                      reference="engine", batch_size=1)

    assert result.warmup == 12 and result.warmup_stable is True


def test_warm_up_of_noisy_timings_stops_at_the_cap():
    noisy = ScriptedRunner(itertools.cycle([1.0, 3.0]))

    (result,) = benchmark_interleaved({"engine": noisy}, FEEDS, _options(max_warmup=20),
                                      reference="engine", batch_size=1)

    assert result.warmup == 20 and result.warmup_stable is False
    assert result.warmup_cv is not None and result.warmup_cv > 0.05


def test_no_warm_up_asked_for_records_none():
    (result,) = benchmark_interleaved({"engine": ScriptedRunner(itertools.repeat(1.0))}, FEEDS,
                                      _options(warmup=0, max_warmup=0), reference="engine",
                                      batch_size=1)

    assert result.warmup == 0 and result.warmup_stable is None and result.warmup_cv is None
