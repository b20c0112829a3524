"""The race drops a candidate once it is surely slower and stops when one is left; ties stay
in to the end; a p99 over the latency budget drops a candidate. Each candidate is timed
against the original at its own thread count, and with the original competing, a candidate
surely slower than it is out and a last one tied with it races on."""

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.search.race import (
    STOPPED_NONE_LEFT,
    STOPPED_ONE_LEFT,
    STOPPED_ROUNDS,
    RaceOptions,
    race,
)
from optimizer.testing.models import small_cnn


def _sleeper(seconds: float):  # type: ignore[no-untyped-def]
    return lambda: time.sleep(seconds)


def test_a_clearly_slower_candidate_is_dropped_and_the_race_stops_early() -> None:
    result = race({"fast": _sleeper(0.002), "slow": _sleeper(0.016)}, _sleeper(0.008),
                  RaceOptions(min_rounds=5, max_rounds=30, calls=3))
    assert result.stopped == STOPPED_ONE_LEFT
    assert result.rounds < 30
    assert result.survivors == ["fast"]
    slow = result.standings["slow"]
    assert slow.out is not None and "slower than fast beyond its interval" in slow.out
    fast = result.standings["fast"]
    assert fast.speedup_ci[0] > 1.2 and fast.speedup > 1.5
    assert fast.latency_ms_p50 < slow.latency_ms_p50 <= slow.latency_ms_p99


def test_identical_candidates_stay_tied_to_the_last_round() -> None:
    result = race({"a": _sleeper(0.003), "b": _sleeper(0.003)}, _sleeper(0.003),
                  RaceOptions(min_rounds=10, max_rounds=10, calls=3))
    assert result.stopped == STOPPED_ROUNDS and result.rounds == 10
    assert sorted(result.survivors) == ["a", "b"]


def test_a_p99_over_the_latency_budget_drops_the_candidate() -> None:
    result = race({"quick": _sleeper(0.001), "heavy": _sleeper(0.03)}, _sleeper(0.002),
                  RaceOptions(min_rounds=3, max_rounds=10, calls=1, latency_budget_ms=20.0))
    heavy = result.standings["heavy"]
    assert heavy.out is not None and heavy.out.startswith("over the latency budget")
    assert result.survivors == ["quick"]


def test_the_deadline_never_stops_the_race_before_its_fewest_rounds() -> None:
    result = race({"a": _sleeper(0.001), "b": _sleeper(0.001)}, _sleeper(0.001),
                  RaceOptions(min_rounds=4, max_rounds=50, calls=1,
                              deadline=time.monotonic()))
    assert result.rounds == 4


def test_real_onnx_runtime_sessions_race_side_by_side(tmp_path: Path) -> None:
    """The original at ONNX Runtime's default level against a copy of itself and against the
    same model on eight times the batch: the copy stays in, the eight-fold work is dropped."""
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=3), path)
    rng = np.random.default_rng(0)
    one = {"input": rng.standard_normal((1, 3, 32, 32), dtype=np.float32)}
    eight = {"input": rng.standard_normal((8, 3, 32, 32), dtype=np.float32)}
    with OnnxRuntimeRunner(path, optimization_level="all") as original, \
            OnnxRuntimeRunner(path, optimization_level="all") as copy:
        result = race({"copy": lambda: copy.infer(one), "eightfold": lambda: original.infer(eight)},
                      lambda: original.infer(one), RaceOptions(min_rounds=5, max_rounds=20))
    assert result.standings["eightfold"].out is not None
    assert "copy" in result.survivors
    low, high = result.standings["copy"].speedup_ci
    assert 0.5 < low <= high < 2.0  # wide: a loaded 2-core CI machine


def test_a_call_serving_two_requests_is_compared_per_request_and_keeps_its_latency() -> None:
    # "pair" answers two requests in 6 ms (3 ms each); "single" one in 4 ms: pair serves more
    result = race({"pair": _sleeper(0.006), "single": _sleeper(0.004)}, _sleeper(0.004),
                  RaceOptions(min_rounds=5, max_rounds=30, calls=3), requests={"pair": 2})
    assert result.survivors == ["pair"]
    pair, single = result.standings["pair"], result.standings["single"]
    assert single.out is not None and "slower than pair" in single.out
    assert pair.requests == 2 and single.requests == 1
    assert pair.latency_ms_p50 > single.latency_ms_p50  # what each request waited
    assert pair.throughput_per_s > single.throughput_per_s
    assert pair.speedup > 1.1  # the original's time per request over the pair's


def test_a_request_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="request counts must be 1 or more"):
        race({"a": _sleeper(0.001)}, _sleeper(0.001), requests={"a": 0})


def test_each_candidate_is_timed_against_the_original_at_its_own_thread_count() -> None:
    # The original at "1 thread" is twice as slow as at the default: a 1-thread candidate
    # as slow as it is no slower than its original, and the default one ties its own.
    result = race({"default": _sleeper(0.004), "one@1t": _sleeper(0.008)},
                  {"": _sleeper(0.004), "@1t": _sleeper(0.008)},
                  RaceOptions(min_rounds=5, max_rounds=8, calls=2),
                  original_of={"one@1t": "@1t"})
    assert set(result.originals_ms_p50) == {"", "@1t"}
    assert result.originals_ms_p50["@1t"] > 1.5 * result.originals_ms_p50[""]
    for standing in result.standings.values():
        assert 0.8 < standing.speedup < 1.25, standing


def test_a_candidate_with_an_unknown_original_is_refused() -> None:
    with pytest.raises(ValueError, match="no original"):
        race({"a": _sleeper(0.001)}, {"": _sleeper(0.001)}, original_of={"a": "@3t"})


def test_with_the_original_competing_candidates_surely_slower_than_it_are_out() -> None:
    result = race({"slow": _sleeper(0.012), "slower": _sleeper(0.02)}, _sleeper(0.003),
                  RaceOptions(min_rounds=5, max_rounds=30, calls=2, original_competes=True))
    assert result.stopped == STOPPED_NONE_LEFT and result.rounds < 30
    assert result.survivors == []
    for standing in result.standings.values():
        assert standing.out is not None
        assert standing.out.startswith("slower than the original beyond its interval")


def test_a_last_candidate_tied_with_the_competing_original_races_to_the_last_round() -> None:
    options = RaceOptions(min_rounds=5, max_rounds=10, calls=2)
    runs = {"tied": _sleeper(0.003), "slow": _sleeper(0.02)}
    assert race(runs, _sleeper(0.003), options).stopped == STOPPED_ONE_LEFT
    result = race(runs, _sleeper(0.003), replace(options, original_competes=True))
    assert result.stopped == STOPPED_ROUNDS and result.rounds == 10
    assert result.survivors == ["tied"]
