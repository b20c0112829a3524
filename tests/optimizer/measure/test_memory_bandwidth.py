"""The memory-bandwidth probe: a positive figure, quickly, measured once per process."""

import time

from optimizer.measure.memory_bandwidth import measure_copy_bandwidth_gb_s, memory_bandwidth_gb_s


def test_probe_returns_a_positive_figure_in_well_under_five_seconds() -> None:
    started = time.perf_counter()
    figure = measure_copy_bandwidth_gb_s()

    assert time.perf_counter() - started < 5.0
    assert 0.1 < figure < 10_000  # GB/s: any real machine's memory lies in this range


def test_the_figure_is_measured_once_and_kept() -> None:
    first = memory_bandwidth_gb_s()
    started = time.perf_counter()

    assert memory_bandwidth_gb_s() == first
    assert time.perf_counter() - started < 0.01
