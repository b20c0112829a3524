"""Time several ways of running one model against the first, interleaved in one process.

This machine (and a shared GPU) is noisy, so no variant is timed alone: each round runs every
variant in turn (several calls, the median kept), and a variant's speed is the median over
rounds of its ratio to the first variant's time in the same round, with the bootstrap interval
of that median. A variant is faster only when the whole interval lies below 1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.measure.stats import bootstrap_median_ci

__all__ = ["LatencyRatio", "interleaved_call_ratios"]

_MIN_ROUND_S, _MAX_CALLS = 0.02, 200


@dataclass(frozen=True)
class LatencyRatio:
    """One variant's time over the baseline's: the median of per-round ratios and its interval."""

    median_ms: float
    ratio: float
    ratio_low: float
    ratio_high: float

    @property
    def faster(self) -> bool:
        return self.ratio_high < 1.0

    def to_dict(self) -> dict[str, float]:
        return {"median_ms": round(self.median_ms, 4), "ratio": round(self.ratio, 4),
                "ratio_low": round(self.ratio_low, 4), "ratio_high": round(self.ratio_high, 4)}


def interleaved_call_ratios(runs: Sequence[Callable[[], object]], *, rounds: int = 9,
                            calls: int = 3, seed: int = 0) -> list[LatencyRatio]:
    """Each run's latency ratio to `runs[0]` (whose own ratio is 1) over `rounds` interleaved
    rounds of at least `calls` calls each (more for a fast model: a round lasts at least
    _MIN_ROUND_S, so a scheduler tick does not decide it)."""
    for run in runs:
        run()  # warm-up: allocations and first-call costs
    started = time.perf_counter()
    runs[0]()
    first_s = time.perf_counter() - started
    calls = min(_MAX_CALLS, max(calls, math.ceil(_MIN_ROUND_S / max(first_s, 1e-6))))
    times = np.empty((rounds, len(runs)))
    for round_index in range(rounds):
        for index, run in enumerate(runs):
            calls_s = []
            for _ in range(calls):
                started = time.perf_counter()
                run()
                calls_s.append(time.perf_counter() - started)
            times[round_index, index] = float(np.median(calls_s))
    rng = np.random.default_rng(seed)
    results = []
    for index in range(len(runs)):
        ratios = times[:, index] / times[:, 0]
        low, high = bootstrap_median_ci(ratios, rng, resamples=500)
        results.append(LatencyRatio(median_ms=float(np.median(times[:, index])) * 1e3,
                                    ratio=float(np.median(ratios)), ratio_low=low,
                                    ratio_high=high))
    return results
