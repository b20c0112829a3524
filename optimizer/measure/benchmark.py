"""Time several runners on the same batch, interleaved so drifting machine load hits them alike."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from optimizer.backends.runner import DeviceTimedRunner, Runner
from optimizer.errors import InternalError
from optimizer.measure.memory_probe import measure_peak_memory_mb
from optimizer.measure.stats import (
    bootstrap_median_ci,
    coefficient_of_variation,
    round_significant,
    speedup_verdict,
)

__all__ = ["HOST_CLOCK", "BenchmarkOptions", "BenchmarkResult", "benchmark_interleaved"]

HOST_CLOCK = "host_clock"  # time.perf_counter_ns around Runner.infer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchmarkOptions:
    warmup: int = 5  # fewest untimed runs per variant first: allocators, caches, lazy init
    iterations: int = 30  # timed rounds; every variant runs once per round
    measure_memory: bool = True  # one child process per variant (see optimizer.measure.memory_probe)
    # The warm-up goes on until the last `warmup_window` runs vary by less than this coefficient
    # of variation, or `max_warmup` runs (never fewer than `warmup`).
    warmup_cv_threshold: float = 0.05
    max_warmup: int = 50
    warmup_window: int = 5
    bootstrap_resamples: int = 2000  # of the confidence intervals (optimizer.measure.stats)
    seed: int = 0  # of the bootstrap: the same timings always give the same intervals


@dataclass(frozen=True)
class BenchmarkResult:
    variant: str
    backend: str
    batch_size: int
    iterations: int
    warmup: int
    latency_ms_p50: float
    latency_ms_p90: float
    latency_ms_p99: float
    latency_ms_mean: float
    throughput_per_s: float  # samples per second: batch_size / mean latency
    peak_memory_mb: float | None  # None when not measured or the probe failed
    speedup_vs_reference: float | None  # median over rounds of reference / this; None for it
    timing: str = HOST_CLOCK  # the clock behind the latencies (see benchmark_interleaved)
    device_memory_mb: float | None = None  # accelerator memory held, for device runners
    # bootstrap confidence interval of the speed-up (median of per-round reference/this ratios)
    # and its verdict: "faster", "slower" or "no measurable difference" (the interval reaches
    # within 1% of 1.0)
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_verdict: str | None = None
    latency_ms_p50_ci_low: float | None = None  # bootstrap interval of the median latency
    latency_ms_p50_ci_high: float | None = None
    latencies_ms: list[float] | None = None  # every timed round, in order
    warmup_cv: float | None = None  # coefficient of variation of the warm-up's last window
    warmup_stable: bool | None = None  # False: the warm-up reached its cap before settling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def benchmark_interleaved(
    variants: Mapping[str, Runner],
    feeds: Mapping[str, np.ndarray],
    options: BenchmarkOptions,
    *,
    reference: str,
    batch_size: int,
) -> list[BenchmarkResult]:
    """Benchmark every variant on `feeds`, one result per variant in the order given.

    Each variant first warms up until its timings settle (`BenchmarkOptions.warmup_cv_threshold`
    over the last `warmup_window` runs, between `warmup` and `max_warmup` runs). Each round then
    times every variant once, rotating which goes first and which before which (`_round_order`),
    so a slow spell on the machine lands on all of them and speedups are taken within a round;
    their median gets a bootstrap interval and a verdict (optimizer.measure.stats). When
    every variant is a `DeviceTimedRunner` with the same clock (TensorRT engines: CUDA
    events), the device times each run, inputs already on it; otherwise the host clock times
    `infer` (copies included), so variants are always compared on one clock.

    >>> benchmark_interleaved({"original": a, "optimized": b}, feeds, BenchmarkOptions(),
    ...                       reference="original", batch_size=8)   # doctest: +SKIP

    Raises:
        InternalError: `reference` is not a variant, or the counts are not positive.
        InferenceError: a runner fails while running.
    """
    names = list(variants)
    if reference not in variants:
        raise InternalError(
            f"Benchmark reference {reference!r} is not among the variants {names}.")
    if options.iterations < 1 or options.warmup < 0 or batch_size < 1:
        raise InternalError(
            f"Benchmark needs iterations >= 1, warmup >= 0 and batch_size >= 1; got "
            f"{options.iterations}, {options.warmup} and {batch_size}.")
    clock = _shared_device_clock(variants)
    warmups = {name: _warm_up(variants[name], feeds, options, device=clock is not None)
               for name in names}
    rng = np.random.default_rng(options.seed)
    times_ns: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(options.iterations):
        for name in _round_order(names, round_index):
            times_ns[name].append(_time_once(variants[name], feeds, device=clock is not None))
    reference_ns = np.array(times_ns[reference], dtype=np.float64)
    results = []
    for name in names:
        ns = np.array(times_ns[name], dtype=np.float64)
        latency_ms = ns / 1e6
        mean_ms = float(latency_ms.mean())
        ratios = reference_ns / np.maximum(ns, 1.0)
        p50_low, p50_high = bootstrap_median_ci(latency_ms, rng,
                                                resamples=options.bootstrap_resamples)
        ci: tuple[float, float] | None = None
        if name != reference:
            ci = bootstrap_median_ci(ratios, rng, resamples=options.bootstrap_resamples)
        warmup = warmups[name]
        results.append(BenchmarkResult(
            variant=name,
            backend=variants[name].spec().backend,
            batch_size=batch_size,
            iterations=options.iterations,
            warmup=warmup.runs,
            latency_ms_p50=float(np.percentile(latency_ms, 50)),
            latency_ms_p90=float(np.percentile(latency_ms, 90)),
            latency_ms_p99=float(np.percentile(latency_ms, 99)),
            latency_ms_mean=mean_ms,
            throughput_per_s=batch_size / max(mean_ms / 1e3, 1e-12),
            peak_memory_mb=_peak_memory_mb(name, variants[name], feeds)
            if options.measure_memory else None,
            speedup_vs_reference=None if name == reference
            else float(np.median(ratios)),
            timing=clock or HOST_CLOCK,
            device_memory_mb=_device_memory_mb(variants[name]),
            speedup_ci_low=None if ci is None else ci[0],
            speedup_ci_high=None if ci is None else ci[1],
            speedup_verdict=None if ci is None else speedup_verdict(*ci),
            latency_ms_p50_ci_low=p50_low,
            latency_ms_p50_ci_high=p50_high,
            latencies_ms=[round_significant(float(value)) for value in latency_ms],
            warmup_cv=warmup.cv,
            warmup_stable=warmup.stable,
        ))
    return results


def _round_order(names: list[str], round_index: int) -> list[str]:
    """The order of one round: rotated each round so every variant goes first as often; with
    three or more, every other cycle reversed, so each variant also follows each other one as
    often (a plain rotation always puts the same one before it, and a variant that evicts the
    caches would then slow the same neighbour every round)."""
    shift = round_index % len(names)
    order = names[shift:] + names[:shift]
    if len(names) > 2 and (round_index // len(names)) % 2:
        order.reverse()
    return order


@dataclass(frozen=True)
class _WarmUp:
    runs: int
    cv: float | None  # of the last window; None when fewer than two runs were done
    stable: bool | None  # None: no warm-up asked for at all


def _warm_up(runner: Runner, feeds: Mapping[str, np.ndarray], options: BenchmarkOptions, *,
             device: bool) -> _WarmUp:
    """Run `runner` untimed-for-the-results until the last window's coefficient of variation
    is under the threshold (at least `warmup` runs), or until the cap."""
    cap = max(options.max_warmup, options.warmup)
    window = max(options.warmup_window, 2)
    if cap == 0:
        return _WarmUp(runs=0, cv=None, stable=None)
    times: list[float] = []
    cv: float | None = None
    while len(times) < cap:
        times.append(_time_once(runner, feeds, device=device))
        if len(times) >= 2:
            cv = coefficient_of_variation(times[-window:])
        if (len(times) >= max(options.warmup, window) and cv is not None
                and cv < options.warmup_cv_threshold):
            return _WarmUp(runs=len(times), cv=cv, stable=True)
    return _WarmUp(runs=len(times), cv=cv, stable=False)


def _shared_device_clock(variants: Mapping[str, Runner]) -> str | None:
    clocks = {runner.timing_clock if isinstance(runner, DeviceTimedRunner) else None
              for runner in variants.values()}
    return clocks.pop() if len(clocks) == 1 else None


def _time_once(runner: Runner, feeds: Mapping[str, np.ndarray], *, device: bool) -> float:
    """Nanoseconds of one run: the device's clock, or the host's around `infer`."""
    if device:
        assert isinstance(runner, DeviceTimedRunner)
        return runner.time_inference(feeds, warmup=0, iterations=1)[0] * 1e6
    start = time.perf_counter_ns()
    runner.infer(feeds)
    return float(time.perf_counter_ns() - start)


def _device_memory_mb(runner: Runner) -> float | None:
    if not isinstance(runner, DeviceTimedRunner):
        return None
    return runner.device_bytes_in_use / 2**20


def _peak_memory_mb(name: str, runner: Runner, feeds: Mapping[str, np.ndarray]) -> float | None:
    try:
        return measure_peak_memory_mb(runner.spec(), feeds)
    except InternalError as err:
        # Memory is a nice-to-have figure: a failed probe must not lose the timings.
        logger.warning("Peak memory of variant %r not measured: %s", name, err)
        return None
