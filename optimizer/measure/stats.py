"""How sure a benchmark is: bootstrap intervals of medians, a speed-up's verdict, warm-up stability.

A median of 30 rounds on a shared machine moves by a few percent from one job to the next, so a
"1.03x" alone says nothing. The percentile bootstrap gives an interval without assuming a
distribution (latencies are skewed, with a long tail); the generator is seeded by the caller so
the same timings always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "FASTER",
    "NO_DIFFERENCE",
    "SLOWER",
    "TIE_MARGIN",
    "bootstrap_median_ci",
    "coefficient_of_variation",
    "round_significant",
    "speedup_verdict",
]

FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no measurable difference"
# A speed-up interval must clear 1 by this much for a verdict: under 1% is a tie, however
# surely measured (two sessions of one model differ by that much in per-call overhead alone).
TIE_MARGIN = 0.01


def bootstrap_median_ci(samples: Sequence[float] | np.ndarray, rng: np.random.Generator, *,
                        resamples: int = 2000, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile-bootstrap `confidence` interval of the median of `samples`.

    One sample gives the degenerate interval (x, x).

    Raises:
        ValueError: no samples, fewer than one resample, or `confidence` outside (0, 1).
    """
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0 or resamples < 1 or not 0 < confidence < 1:
        raise ValueError(
            f"bootstrap_median_ci needs samples, resamples >= 1 and 0 < confidence < 1; got "
            f"{values.size} samples, {resamples} resamples, confidence {confidence}.")
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    medians = np.median(values[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def speedup_verdict(ci_low: float, ci_high: float) -> str:
    """"faster" when the whole interval of the speed-up lies above 1 + TIE_MARGIN, "slower"
    when below 1 - TIE_MARGIN, else "no measurable difference"."""
    if ci_low > 1.0 + TIE_MARGIN:
        return FASTER
    if ci_high < 1.0 - TIE_MARGIN:
        return SLOWER
    return NO_DIFFERENCE


def coefficient_of_variation(samples: Sequence[float] | np.ndarray) -> float:
    """Standard deviation over mean (population form); inf for a mean of 0 or no samples."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return math.inf
    mean = float(values.mean())
    return float(values.std()) / mean if mean > 0 else math.inf


def round_significant(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits (keeps per-round latency lists small in rows)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))
