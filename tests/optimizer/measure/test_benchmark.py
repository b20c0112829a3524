"""benchmark_interleaved: one sane record per variant, timed in alternating order."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Self

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import RunnerSpec
from optimizer.errors import InternalError
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.model.tensor_specs import TensorSpec

FEEDS = {"input": np.zeros((2, 3, 32, 32), np.float32)}
QUICK = BenchmarkOptions(warmup=1, iterations=6, measure_memory=False)


class RecordingRunner:
    """A runner that records the order of calls and describes an unloadable spec."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return (TensorSpec("input", "float32", (2, 3, 32, 32)),)

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("y",)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(self.name)
        return {"y": np.zeros(1)}

    def spec(self) -> RunnerSpec:
        return RunnerSpec(backend="recording", model_path="/nonexistent/model.onnx")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        pass


def test_benchmark_interleaved_returns_a_sane_record_per_variant(cnn_path):
    with OnnxRuntimeRunner(cnn_path) as original, \
            OnnxRuntimeRunner(cnn_path, optimization_level="all") as optimized:
        results = benchmark_interleaved(
            {"original": original, "optimized": optimized}, FEEDS,
            BenchmarkOptions(warmup=2, iterations=10, measure_memory=True),
            reference="original", batch_size=2)

    assert [result.variant for result in results] == ["original", "optimized"]
    for result in results:
        assert result.backend == "onnxruntime"
        assert (result.batch_size, result.iterations) == (2, 10)
        assert 2 <= result.warmup <= 50 and result.warmup_stable is (result.warmup < 50)
        assert result.latencies_ms is not None and len(result.latencies_ms) == 10
        assert result.latency_ms_p50_ci_low is not None and result.latency_ms_p50_ci_high is not None
        assert result.latency_ms_p50_ci_low <= result.latency_ms_p50 <= result.latency_ms_p50_ci_high
        assert 0 < result.latency_ms_p50 <= result.latency_ms_p90 <= result.latency_ms_p99
        assert result.latency_ms_mean > 0
        assert result.throughput_per_s == pytest.approx(2 / (result.latency_ms_mean / 1e3))
        assert result.peak_memory_mb is not None and result.peak_memory_mb > 0
    assert results[0].speedup_vs_reference is None
    assert results[1].speedup_vs_reference is not None and results[1].speedup_vs_reference > 0
    assert results[0].speedup_ci_low is None and results[0].speedup_verdict is None
    low, high = results[1].speedup_ci_low, results[1].speedup_ci_high
    assert low is not None and high is not None
    assert low <= results[1].speedup_vs_reference <= high
    assert results[1].speedup_verdict in ("faster", "slower", "no measurable difference")


def test_benchmark_interleaved_alternates_which_variant_goes_first():
    calls: list[str] = []
    variants = {name: RecordingRunner(name, calls) for name in ("a", "b")}

    benchmark_interleaved(variants, FEEDS, QUICK, reference="a", batch_size=2)

    timed = calls[-2 * QUICK.iterations:]
    assert [timed[i] for i in range(0, len(timed), 2)] == ["a", "b"] * (QUICK.iterations // 2)


def test_benchmark_interleaved_records_no_memory_when_the_probe_fails(caplog):
    calls: list[str] = []
    variants = {"a": RecordingRunner("a", calls)}

    with caplog.at_level(logging.WARNING, logger="optimizer.measure.benchmark"):
        (result,) = benchmark_interleaved(
            variants, FEEDS, BenchmarkOptions(warmup=0, iterations=2, measure_memory=True),
            reference="a", batch_size=2)

    assert result.peak_memory_mb is None
    assert "Peak memory of variant 'a' not measured" in caplog.text


def test_benchmark_interleaved_skips_memory_when_not_asked():
    (result,) = benchmark_interleaved({"a": RecordingRunner("a", [])}, FEEDS, QUICK,
                                      reference="a", batch_size=2)

    assert result.peak_memory_mb is None


def test_benchmark_interleaved_refuses_a_reference_that_is_not_a_variant():
    with pytest.raises(InternalError, match="reference 'original' is not among the variants"):
        benchmark_interleaved({"a": RecordingRunner("a", [])}, FEEDS, QUICK,
                              reference="original", batch_size=2)


def test_benchmark_result_to_dict_holds_every_field():
    (result,) = benchmark_interleaved({"a": RecordingRunner("a", [])}, FEEDS, QUICK,
                                      reference="a", batch_size=2)

    data = result.to_dict()
    assert data["variant"] == "a" and data["speedup_vs_reference"] is None
    assert set(data) >= {"latency_ms_p50", "latency_ms_p99", "throughput_per_s", "peak_memory_mb"}


class DeviceClockRunner(RecordingRunner):
    """A RecordingRunner whose device takes `device_ms` per run, by its own clock."""

    def __init__(self, name: str, calls: list[str], device_ms: float,
                 clock: str = "cuda_events") -> None:
        super().__init__(name, calls)
        self.device_ms, self.clock = device_ms, clock

    @property
    def timing_clock(self) -> str:
        return self.clock

    @property
    def device_bytes_in_use(self) -> int:
        return 3 * 2**20

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]:
        self.calls.extend([f"{self.name}:device"] * (warmup + iterations))
        return (self.device_ms,) * iterations


def test_device_runners_are_timed_by_their_own_clock():
    calls: list[str] = []
    variants = {"original": DeviceClockRunner("original", calls, device_ms=4.0),
                "engine": DeviceClockRunner("engine", calls, device_ms=1.0)}

    original, engine = benchmark_interleaved(variants, FEEDS, QUICK, reference="original",
                                             batch_size=2)

    assert original.latency_ms_p50 == 4.0 and engine.latency_ms_p50 == 1.0
    assert engine.speedup_vs_reference == 4.0
    assert original.timing == engine.timing == "cuda_events"
    assert engine.device_memory_mb == 3.0
    # the warm-up is timed by the device's clock too: steady 1.0 ms settles it at once
    assert engine.warmup == QUICK.warmup_window and engine.warmup_stable is True
    assert calls.count("engine:device") == engine.warmup + QUICK.iterations


def test_a_host_runner_among_device_runners_puts_every_variant_on_the_host_clock():
    calls: list[str] = []
    variants = {"original": RecordingRunner("original", calls),
                "engine": DeviceClockRunner("engine", calls, device_ms=1.0)}

    original, engine = benchmark_interleaved(variants, FEEDS, QUICK, reference="original",
                                             batch_size=2)

    assert original.timing == engine.timing == "host_clock"
    assert "engine:device" not in calls and engine.latency_ms_p50 != 1.0
    assert original.device_memory_mb is None and engine.device_memory_mb == 3.0


def test_runners_with_different_device_clocks_share_the_host_clock():
    variants = {"a": DeviceClockRunner("a", [], 1.0, clock="cuda_events"),
                "b": DeviceClockRunner("b", [], 1.0, clock="fake_device_clock")}

    results = benchmark_interleaved(variants, FEEDS, QUICK, reference="a", batch_size=2)

    assert {r.timing for r in results} == {"host_clock"}


def test_with_three_variants_each_follows_each_other_equally_often():
    calls: list[str] = []
    variants = {name: RecordingRunner(name, calls) for name in ("a", "b", "c")}

    benchmark_interleaved(variants, FEEDS, BenchmarkOptions(warmup=0, max_warmup=0,
                                                            iterations=12, measure_memory=False),
                          reference="a", batch_size=2)

    rounds = [calls[i:i + 3] for i in range(0, len(calls), 3)]
    firsts = [r[0] for r in rounds]
    assert all(firsts.count(name) == 4 for name in "abc")
    pairs = [(r[i], r[i + 1]) for r in rounds for i in range(2)]
    assert {pair: pairs.count(pair) for pair in set(pairs)} == {
        (x, y): 4 for x in "abc" for y in "abc" if x != y}
