"""The benchmark stage of an onnxruntime job, run by the embedded worker: the engine against the
original at ONNX Runtime's default level, with the unoptimized original alongside; a speed-up
with its interval and verdict; and a batch sweep, skipped (and said) where the batch is fixed."""

from __future__ import annotations

from pathlib import Path

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker

QUICK = {"warmup": 1, "iterations": 5, "measure_memory": False}


def _records(job: dict, suite: str) -> list[dict]:  # type: ignore[type-arg]
    return [b for b in job["benchmarks"] if b["suite"] == suite]


def test_comparison_times_the_original_at_ort_default_and_unoptimized_against_the_engine(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=31)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, input_shapes={"input": [2, 3, 32, 32]},
                                        benchmark=QUICK))

    assert job["status"] == "succeeded", job["error"]
    variants = {b["variant"]: b for b in _records(job, "comparison")}
    assert list(variants) == ["original", "original_unoptimized", "engine"]
    assert variants["original"]["speedup_vs_reference"] is None
    assert variants["original"]["speedup_verdict"] is None
    for name in ("original_unoptimized", "engine"):  # both against "original"
        record = variants[name]
        assert record["speedup_ci_low"] <= record["speedup_vs_reference"] <= record["speedup_ci_high"]
        assert record["speedup_verdict"] in ("faster", "slower", "no measurable difference")
    for record in variants.values():
        assert len(record["latencies_ms"]) == 5 and record["warmup"] >= 1
        assert record["latency_ms_p50_ci_low"] <= record["latency_ms_p50"] \
            <= record["latency_ms_p50_ci_high"]
        assert record["warmup_stable"] in (True, False) and record["warmup_cv"] is not None
    assert _records(job, "sweep") == []


def test_an_engine_identical_to_the_original_makes_no_measurable_difference(
        embedded: EmbeddedWorker) -> None:
    # Static inputs and no passes: the engine is the original at ONNX Runtime's default level.
    # At batch 8 (~0.4 ms a run) ONNX Runtime's microsecond of per-call overhead, which differs
    # a little between sessions, is under 0.5% (at batch 1, ~50 us, it made a 1-2% difference
    # the interval could resolve).
    model_id = embedded.upload(model_bytes(small_cnn(seed=32, batch=8)), "cnn.onnx")
    job = embedded.wait(embedded.submit(
        model_id, passes="none",
        benchmark={"warmup": 5, "iterations": 60, "measure_memory": False}))

    assert job["status"] == "succeeded", job["error"]
    engine = next(b for b in _records(job, "comparison") if b["variant"] == "engine")
    # within 1% of 1.0 (per-call overhead can differ that much between two sessions)
    assert engine["speedup_ci_low"] <= 1.01 and engine["speedup_ci_high"] >= 0.99, engine
    assert engine["speedup_verdict"] == "no measurable difference"


def test_a_batch_sweep_times_original_and_engine_at_each_batch_size(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=33)), "cnn.onnx")
    job = embedded.wait(embedded.submit(
        model_id, input_shapes={"input": [2, 3, 32, 32]},
        benchmark={**QUICK, "measure_memory": True, "batch_sizes": [1, 2, 4]}))

    assert job["status"] == "succeeded", job["error"]
    sweep = _records(job, "sweep")
    assert sorted((b["batch_size"], b["variant"]) for b in sweep) == [
        (1, "engine"), (1, "original"), (2, "engine"), (2, "original"),
        (4, "engine"), (4, "original")]
    for record in sweep:
        assert record["peak_memory_mb"] is not None and record["peak_memory_mb"] > 0
        assert record["latency_ms_p50"] > 0 and len(record["latencies_ms"]) == 5
        if record["variant"] == "engine":
            assert record["speedup_verdict"] is not None
    per_batch = {b["batch_size"]: b["throughput_per_s"] for b in sweep if b["variant"] == "engine"}
    assert set(per_batch) == {1, 2, 4}


def test_a_model_with_a_fixed_batch_skips_the_sweep_and_says_so(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=34, batch=1)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, benchmark={**QUICK, "batch_sizes": [2, 4]}))

    assert job["status"] == "succeeded", job["error"]
    assert _records(job, "sweep") == []
    notes = [e["message"] for e in job["events"] if e["message"].startswith("benchmark sweep")]
    assert len(notes) == 2 and all("batch dim" in note and "fixed at 1" in note for note in notes)
    assert {e["stage"] for e in job["events"] if e["message"] in notes} == {"benchmark"}


def test_a_tensorrt_sweep_stays_within_the_profile_and_says_what_it_skipped(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=35)), "cnn.onnx")
    profile = {"min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [4, 3, 32, 32]}
    job = embedded.wait(embedded.submit(
        model_id, backend="tensorrt", profiles={"input": profile},
        benchmark={**QUICK, "batch_sizes": [1, 4, 8]}))

    assert job["status"] == "succeeded", job["error"]
    # TensorRT keeps its reference: its own engine of the unfused model, no unoptimized variant
    assert [b["variant"] for b in _records(job, "comparison")] == ["original", "engine"]
    assert sorted((b["batch_size"], b["variant"]) for b in _records(job, "sweep")) == [
        (1, "engine"), (1, "original"), (4, "engine"), (4, "original")]
    notes = [e["message"] for e in job["events"] if e["message"].startswith("benchmark sweep")]
    assert notes == ["benchmark sweep: batch size 8 skipped: outside the batch range of the "
                     "profile of input (1..4)"]


def test_a_tensorrt_engine_without_profiles_skips_the_sweep_saying_why(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=36)), "cnn.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="tensorrt", input_shapes={"input": [2, 3, 32, 32]},
        benchmark={**QUICK, "batch_sizes": [4]}))

    assert job["status"] == "succeeded", job["error"]
    assert _records(job, "sweep") == []
    assert [e["message"] for e in job["events"] if e["message"].startswith("benchmark sweep")] == [
        "benchmark sweep: batch size 4 skipped: the engine is built for batch size 2 only (give "
        "optimization profiles whose axis 0 varies to sweep batch sizes)"]
