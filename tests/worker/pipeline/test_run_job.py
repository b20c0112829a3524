"""The pipeline run in-process by an embedded Celery worker on the real Redis broker: stages in
order, the fallback loop, failures that keep their evidence, cancel, and the TensorRT backend
through FakeTensorRT (tests/support/fake_tensorrt.py: no TensorRT or GPU can exist here)."""

from __future__ import annotations

import html
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from optimizer.capabilities import HostCapabilities
from optimizer.testing.models import model_bytes, small_cnn
from optimizer.testing.shape_models import lstm_in_a_loop, lstm_in_nested_ifs
from tests.support.embedded_worker import EmbeddedWorker
from worker.runtime import use_runtime

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
IMPOSSIBLE = {"atol": 1e-12, "rtol": 0, "samples": 2}  # fused arithmetic never meets this
STAGES = ["load", "optimize", "build_engine", "validate", "benchmark", "profile", "store"]


def _stage_events(job: dict) -> list[str]:  # type: ignore[type-arg]
    return [e["message"] for e in job["events"] if e["message"].startswith("stage ")]


def test_a_job_runs_every_stage_in_order_and_commits_its_records(embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=21)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, input_shapes={"input": [2, 3, 32, 32]},
                                        benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert [e["stage"] for e in job["events"] if e["message"].startswith("stage ")] == STAGES
    assert job["progress"] == 1.0 and job["stage"] == "done"
    assert {a["name"] for a in job["artifacts"]} == {"engine.onnx", "manifest.json", "fused.onnx",
                                                     "fusion_report.json",
                                                     "latency_distribution.svg", "report.html"}
    assert job["validation"]["passed"] is True
    assert job["accuracy_report"]["passed_first_time"] is True
    # The verdict says what it was reached on: the job's shapes (the engine is static).
    assert job["accuracy_report"]["input_shapes"] == [
        {"input_shapes": {"input": [2, 3, 32, 32]}, "samples": 8, "passed": True}]
    assert job["accuracy_report"]["input_ranges"] == {}
    assert {b["variant"] for b in job["benchmarks"]} == {"original", "original_unoptimized", "engine"}
    stored = embedded.runtime.settings.artifacts_dir / "jobs" / job["id"] / "1"  # its first claim
    assert {p.name for p in stored.iterdir()} == {a["name"] for a in job["artifacts"]}
    assert not (embedded.runtime.settings.scratch_dir / job["id"]).exists()
    profile = job["profile_report"]
    # Every engine node maps back to the original's; the top one is the fused residual conv.
    assert profile["mapping"]["engine_nodes_mapped"] == profile["mapping"]["engine_nodes"] > 0
    assert profile["top_nodes"][0]["from"] and profile["hot_spot"].startswith(
        profile["top_nodes"][0]["node"])
    assert {"Conv"} <= {row["op_type"] for row in profile["by_op_type"]}
    assert profile["engine"]["latency_ms"] > 0 and profile["input_shapes"] == {
        "input": [2, 3, 32, 32]}
    # report.html stands alone: every section, the hot spot, and nothing fetched from elsewhere.
    page = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/report.html").text
    for section in ("fusions", "accuracy", "precision", "benchmarks", "profile", "environment"):
        assert f'<section id="{section}">\n<details class="fold">' in page
    assert profile["top_nodes"][0]["node"] in page and "validation" in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "<script" not in page
    # It opens with the job's outcome, in the API's words, and the engine's download (issue 45).
    headline = job["outcome"]["headline"]
    assert headline.startswith("Shipped the onnxruntime fp32 engine: ")
    assert page.index('<section id="outcome"') < page.index('<section id="fusions">')
    assert f'<p class="outcome-headline" id="outcome-headline">{html.escape(headline)}</p>' in page
    assert 'id="download-engine" href="engine.onnx"' in page


_ZOO_SQUEEZENET = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"


@pytest.mark.skipif(not _ZOO_SQUEEZENET.is_file(), reason="the onnx package ships no zoo models")
def test_a_zoo_model_listing_its_weights_as_inputs_is_optimized_validated_and_profiled(
        embedded: EmbeddedWorker) -> None:
    # IR version 3 lists every weight as a graph input too; the engine ONNX Runtime wrote
    # after folding them used to ask for them as inputs, and validation failed internally.
    model_id = embedded.upload(_ZOO_SQUEEZENET.read_bytes(), "squeezenet.onnx")
    job = embedded.wait(embedded.submit(model_id, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    mapping = job["profile_report"]["mapping"]
    assert mapping["engine_nodes_mapped"] == mapping["engine_nodes"] > 0


def test_a_model_onnxruntime_cannot_load_with_fixed_inputs_gets_an_engine_with_dynamic_ones(
        embedded: EmbeddedWorker) -> None:
    # A recurrent model with its unused 8 kHz network in a Loop body: fixed at the job's shapes,
    # that body no longer type-checks at ONNX Runtime's level all, so the job used to fail.
    model_id = embedded.upload(model_bytes(lstm_in_a_loop()), "vad.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="onnxruntime", ort_optimization_level="all",
        input_shapes={"input": [1, 16], "state": [2, 1, 16], "sr": []},
        input_ranges={"sr": [16000, 16001]}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert "First input tensor must have rank 3" in job["engine_report"]["inputs_left_dynamic"]
    assert job["validation"]["passed"] is True
    engine_dir = embedded.runtime.settings.artifacts_dir / "jobs" / job["id"] / "1"  # its first claim
    manifest = json.loads((engine_dir / "manifest.json").read_text())
    assert manifest["inputs_left_dynamic"] is True
    assert manifest["load_optimization_level"] == "all"
    declared = [[d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
                for value in onnx.load(engine_dir / "engine.onnx").graph.input]
    assert declared[0] == ["N", 16]  # the model's own dynamic batch, not the job's 1


def test_a_model_whose_unused_if_branch_cannot_run_at_the_jobs_shapes_gets_an_engine_at_them(
        embedded: EmbeddedWorker) -> None:
    # silero-vad's layout: the 8 kHz network in an If branch, which cannot run at these shapes.
    model_id = embedded.upload(model_bytes(lstm_in_nested_ifs(seed=4)), "vad.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="onnxruntime", ort_optimization_level="all",
        input_shapes={"input": [1, 16], "state": [2, 1, 16], "sr": []},
        input_ranges={"sr": [16000, 16001]}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    assert (job["engine_report"] or {}).get("inputs_left_dynamic") is None
    engine_dir = embedded.runtime.settings.artifacts_dir / "jobs" / job["id"] / "1"  # its first claim
    declared = [[d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
                for value in onnx.load(engine_dir / "engine.onnx").graph.input]
    assert declared == [[1, 16], [2, 1, 16], []]


def test_fallback_loops_over_attempts_then_ships_the_original_when_none_validates(
        embedded: EmbeddedWorker) -> None:
    # Was: the last attempt was the unfused model with ONNX Runtime's optimizations off (the
    # reference itself), which always validates and shipped at 0.82x the original's speed on
    # PP-OCRv5's detector. Now the last resort is the upload itself at ORT's default level.
    uploaded = model_bytes(small_cnn(seed=22))
    model_id = embedded.upload(uploaded, "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, on_validation_failure="fallback",
                                        validation=IMPOSSIBLE, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    report = job["accuracy_report"]
    assert report["passed_first_time"] is False
    why = report["original_shipped"]
    assert why == report["fallback"]["original_shipped"]
    assert why.startswith("every attempt failed validation (the job's passes; ")
    assert why.endswith("; no fusion passes, ONNX Runtime level 'all')")
    assert report["fallback"]["kept"] == (
        "the original model, unchanged, at ONNX Runtime's default level 'all'")
    assert report["fallback"]["first_failure"]["passed"] is False
    assert report["bisection"] is not None and "blame" in report
    events = _stage_events(job)
    # The first round, then one round per fallback attempt, each saying which it is.
    assert events[:4] == [f"stage {s} started" for s in STAGES[:4]]
    assert events[-4:] == [
        "stage validate started (fallback: no fusion passes, ONNX Runtime level 'all')",
        "stage benchmark started", "stage profile started", "stage store started"]
    assert any(e["message"].startswith("the original model ships unchanged: every attempt "
                                       "failed validation") for e in job["events"])
    # The engine is the upload's own bytes, loaded as its user runs it.
    engine = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/engine.onnx")
    assert engine.content == uploaded
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert (manifest["original"], manifest["load_optimization_level"],
            manifest["disabled_optimizers"]) == (True, "all", {})
    assert "original model ships unchanged" in job["profile_report"]["skipped"]


def _folds_to_a_constant(size: int = 384) -> onnx.ModelProto:
    """y = x @ (a @ b), a and b weights: ONNX Runtime folds a @ b once at its default level;
    with its optimizations off it multiplies them on every run (size³ multiply-adds), so an
    engine built at level "disabled" is many times slower than the original."""
    rng = np.random.default_rng(5)
    weights = [onnx.numpy_helper.from_array(
        rng.standard_normal((size, size)).astype(np.float32) / size, name)
        for name in ("a", "b")]
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["a", "b"], ["w"]),
         onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "folds",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, size])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, size])], weights)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)],
                                  ir_version=8)


def test_an_engine_measured_slower_than_the_original_does_not_ship(
        embedded: EmbeddedWorker) -> None:
    uploaded = model_bytes(_folds_to_a_constant())
    model_id = embedded.upload(uploaded, "folds.onnx")
    job = embedded.wait(embedded.submit(
        model_id, passes="none", ort_optimization_level="disabled",
        benchmark={"warmup": 2, "iterations": 20, "measure_memory": False}))

    assert job["status"] == "succeeded", job["error"]
    engine_row = next(b for b in job["benchmarks"] if b["variant"] == "engine")
    assert engine_row["speedup_verdict"] == "slower"  # the records stay as measured
    why = job["accuracy_report"]["original_shipped"]
    assert why == (f"the engine measured {engine_row['speedup_vs_reference']:.2f}x the "
                   f"original's speed ({engine_row['speedup_ci_low']:.2f}-"
                   f"{engine_row['speedup_ci_high']:.2f})")
    assert job["accuracy_report"]["fallback"] is None
    engine = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/engine.onnx")
    assert engine.content == uploaded
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert (manifest["original"], manifest["load_optimization_level"]) == (True, "all")
    assert job["validation"]["passed"] is True  # the verdict is on what ships
    assert any(e["message"] == f"the original model ships unchanged: {why}"
               for e in job["events"])


def test_a_failed_validation_keeps_its_verdict_blame_and_divergence(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=23)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, validation=IMPOSSIBLE, benchmark=FAST_BENCHMARK))

    assert job["status"] == "failed"
    assert job["error"]["code"] == "AccuracyMismatchError"
    message = job["error"]["message"]
    assert "differ from the original model's beyond tolerance" in message
    report = job["accuracy_report"]
    assert report["passed_first_time"] is False and report["blame"] in message
    # Advice that fits an fp32 job: the blamed rule's pass, the fallback, the limits to
    # loosen; no wider precision exists, so none is offered.
    assert "higher precision" not in message and "build at" not in message
    blamed = report["bisection"]["culprits"][0][0]
    assert "To pass, leave out pass(es) " in message and f"rule(s) {blamed})" in message
    assert 'set "on_validation_failure": "fallback"' in message
    assert message.endswith("loosen atol (now 1e-12), rtol (now 0) in the job's validation "
                            "tolerances.")
    assert job["validation"]["passed"] is False  # the rows explain the failure
    assert job["artifacts"] == [] and job["benchmarks"] == []
    assert not (embedded.runtime.settings.scratch_dir / job["id"]).exists()
    # Its outcome: nothing shipped, the error's first sentence, the verdict's worst metric.
    outcome = job["outcome"]
    assert outcome["shipped"] is None and outcome["speedup"] is None
    assert outcome["headline"].startswith(
        "Failed (AccuracyMismatchError), nothing shipped (onnxruntime fp32 asked): ")
    worst = outcome["accuracy"]["worst"]
    assert outcome["accuracy"]["verdict"] == "failed"
    assert worst["text"] == report["failures"][0]["message"]


def test_cancel_during_a_stage_stops_the_run_and_stores_nothing(embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=24)), "cnn.onnx")
    job_id = embedded.submit(model_id, benchmark={"warmup": 0, "iterations": 5000,
                                                   "measure_memory": False})
    deadline = time.monotonic() + 120
    while embedded.job(job_id)["stage"] != "benchmark":
        assert time.monotonic() < deadline, "the job never reached its benchmark"
        time.sleep(0.02)
    assert embedded.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    # The run stops at its next stage boundary; the next job then runs on the same worker.
    after = embedded.wait(embedded.submit(model_id, benchmark=FAST_BENCHMARK))
    assert after["status"] == "succeeded", after["error"]

    job = embedded.job(job_id)
    assert job["status"] == "cancelled" and job["error"] is None
    assert job["artifacts"] == [] and job["benchmarks"] == []
    assert not (embedded.runtime.settings.artifacts_dir / "jobs" / job_id).exists()
    assert not (embedded.runtime.settings.scratch_dir / job_id).exists()


def test_tensorrt_job_builds_its_engine_and_times_it_against_the_unfused_engine(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=25)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, backend="tensorrt", benchmark=FAST_BENCHMARK,
                                        input_shapes={"input": [2, 3, 32, 32]}))

    assert job["status"] == "succeeded", job["error"]
    assert {a["name"] for a in job["artifacts"]} == {
        "engine.plan", "metadata.json", "engine_report.json", "build.log", "fused.onnx",
        "fusion_report.json", "latency_distribution.svg", "report.html"}
    report = job["engine_report"]
    assert report["metadata"]["precision"] == "fp32"
    assert report["reference_engine"]["engine_bytes"] != report["metadata"]["engine_bytes"]
    assert {b["backend"] for b in job["benchmarks"]} == {"fake-tensorrt"}
    assert job["config"]["ort_optimization_level"] is None
    # The per-layer profile: each engine layer names the original nodes it computes, the
    # fused Conv+Relu layer both (the inspector's layer through the fused model's origin tags).
    profile = job["profile_report"]
    assert profile["profiler"].startswith("TensorRT's per-layer profiler")
    assert profile["mapping"]["engine_nodes_mapped"] == profile["mapping"]["engine_nodes"] > 0
    fused_layers = [row for row in profile["top_nodes"] if len(row["from"]) > 1]
    assert any({"Conv", "Relu"} <= set(row["from_op_types"]) for row in fused_layers)
    assert {row["op_type"] for row in profile["by_op_type"]}


def test_tensorrt_fallback_ends_at_the_unfused_engine_and_blames_tensorrt(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    fake_tensorrt_control.write_text(json.dumps({"corrupt_batches_above": 0}))
    model_id = embedded.upload(model_bytes(small_cnn(seed=26)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, backend="tensorrt", benchmark=FAST_BENCHMARK,
                                        on_validation_failure="fallback"))

    assert job["status"] == "failed"
    assert job["error"]["code"] == "AccuracyMismatchError"
    assert "TensorRT's engine of the unfused model" in job["error"]["message"]
    assert job["accuracy_report"]["blame"].endswith("TensorRT's own optimizations")
    events = _stage_events(job)
    assert "stage build_engine started (fallback: no fusion passes: TensorRT's engine of the " \
           "unfused model)" in events


def test_tensorrt_job_on_a_worker_without_a_gpu_fails_up_front_saying_why(
        embedded: EmbeddedWorker) -> None:
    cpu_only = replace(embedded.runtime,
                       capabilities=HostCapabilities(notes=("nvidia-smi not found",)))
    model_id = embedded.upload(model_bytes(small_cnn(seed=27)), "cnn.onnx")
    with use_runtime(cpu_only):
        job = embedded.wait(embedded.submit(model_id, backend="tensorrt"))

    assert job["status"] == "failed" and job["error"]["code"] == "EngineBuildError"
    assert "needs a worker with an NVIDIA GPU and TensorRT" in job["error"]["message"]
    assert job["stage"] is None  # refused before any stage ran
