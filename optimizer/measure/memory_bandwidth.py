"""This machine's main-memory bandwidth, measured once per process: what a benchmark's achieved
bytes per second are a fraction of.

A STREAM-like copy: `np.copyto` of an array far larger than any CPU cache, a few times, the
best run counted as bytes read plus bytes written per second. The best, not the mean: other
work on the machine can only slow a copy, so the fastest is the closest to what the memory
can do. It takes well under a second (about 0.2 s at 10 GB/s) and its buffers are freed
after. Device (GPU) memory is not measured here: a GPU worker's figure is the host's.

    >>> memory_bandwidth_gb_s() > 0
    True
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np

__all__ = ["PROBE_BYTES", "measure_copy_bandwidth_gb_s", "memory_bandwidth_gb_s"]

PROBE_BYTES = 64 * 2**20  # per array: 64 MiB is many times the largest L3 of common CPUs
_REPEATS = 4
_BUDGET_S = 0.8  # stop repeating once this much time has gone: a slow machine still ends fast


@cache
def memory_bandwidth_gb_s() -> float | None:
    """The figure for this process, measured on first call and kept; None if the probe could
    not allocate its buffers."""
    try:
        return measure_copy_bandwidth_gb_s()
    except MemoryError:
        return None


def measure_copy_bandwidth_gb_s(size_bytes: int = PROBE_BYTES, repeats: int = _REPEATS) -> float:
    """Copy a `size_bytes` array `repeats` times (fewer if the time budget runs out); the best
    copy's (read + write) bytes per second, in GB/s (10^9)."""
    source = np.ones(size_bytes // 8, dtype=np.float64)  # written: its pages are really mapped
    target = np.zeros_like(source)
    target.fill(1.0)
    best = float("inf")
    started = time.perf_counter()
    for _ in range(max(repeats, 1)):
        begin = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - begin)
        if time.perf_counter() - started > _BUDGET_S:
            break
    moved = 2 * source.nbytes  # each byte read once and written once
    return round(moved / max(best, 1e-9) / 1e9, 2)
