"""OpenVINO jobs end to end through the embedded worker (a real OpenVINO, ONNX Runtime, Redis and
database): fp32 and bf16 on a model built in code and on PP-OCRv5's packaged detector; the IR
ships (engine.xml + engine.bin + manifest), judged against the original and timed against it at
ONNX Runtime's default level; its profile comes from OpenVINO's performance counters."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from optimizer.registries.precisions import Precision
from optimizer.testing.models import model_bytes, small_cnn
from optimizer.testing.quantization_models import calibration_images, conv_stack
from tests.support.embedded_worker import EmbeddedWorker
from tests.support.host_cpu import cpu_refusal, needs_cpu_for
from tests.support.packaged_wheels import PPOCRV5_DETECTOR, packaged_model

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
IR_FILES = {"engine.xml", "engine.bin", "manifest.json"}

NEEDS_BF16 = needs_cpu_for(Precision.BF16)


@pytest.mark.parametrize(("precision", "inference"), [
    ("fp32", "f32"), pytest.param("bf16", "bf16", marks=NEEDS_BF16)])
def test_an_openvino_job_ships_the_ir_at_its_precision(embedded: EmbeddedWorker,
                                                      precision: str, inference: str) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=31)), "cnn.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", precision=precision, intra_op_threads=1,
        input_shapes={"input": [2, 3, 32, 32]}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert IR_FILES <= {a["name"] for a in job["artifacts"]}
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert (manifest["backend"], manifest["precision"], manifest["inference_precision"],
            manifest["threads"]) == ("openvino", precision, inference, 1)
    assert manifest["input_shapes"] == {"input": [2, 3, 32, 32]}
    assert job["validation"]["passed"] is True
    if precision == "bf16":  # judged on the real bf16 engine, not an emulation
        evaluation = job["accuracy_report"]["precision_evaluation"]
        assert evaluation == {"method": "backend", "backend": "openvino"}
        assert "bf16" in manifest["runtime_precisions"]
        assert "model.bf16.onnx" not in {a["name"] for a in job["artifacts"]}  # no conversion
    else:
        assert set(manifest["runtime_precisions"]) <= {"f32", "i32", "i64"}
    # The yardstick: the original at ONNX Runtime's default level.
    assert {b["variant"] for b in job["benchmarks"]} >= {"original", "engine"}
    original = next(b for b in job["benchmarks"] if b["variant"] == "original")
    assert original["backend"] == "onnxruntime"
    profile = job["profile_report"]
    assert "OpenVINO's per-layer performance counters" in profile["profiler"]
    assert profile["mapping"]["engine_nodes_mapped"] == profile["mapping"]["engine_nodes"] > 0
    assert job["outcome"]["shipped"]["backend"] == "openvino"
    page = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/report.html").text
    assert "openvino" in page.lower()


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=NEEDS_BF16)])
def test_an_openvino_job_on_the_ppocrv5_detector(embedded: EmbeddedWorker, tmp_path: Path,
                                                 precision: str) -> None:
    detector = packaged_model(PPOCRV5_DETECTOR, tmp_path)
    model_id = embedded.upload(detector.read_bytes(), "ppocrv5_det.onnx")

    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", precision=precision, passes="all",
        input_shapes={"x": [1, 3, 320, 320]}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    outcome = job["outcome"]
    assert outcome["accuracy"]["verdict"] == "passed"
    assert (outcome["shipped"]["what"], outcome["shipped"]["backend"]) == ("engine", "openvino")
    assert IR_FILES <= {a["name"] for a in job["artifacts"]}


def test_an_openvino_job_no_attempt_validates_ships_the_original_as_onnx_runtimes(
        embedded: EmbeddedWorker) -> None:
    uploaded = model_bytes(small_cnn(seed=32))
    model_id = embedded.upload(uploaded, "cnn.onnx")

    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", on_validation_failure="fallback",
        validation={"atol": 1e-12, "rtol": 0, "samples": 2}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    events = [e["message"] for e in job["events"]]
    assert "stage build_engine started (fallback: no fusion passes: OpenVINO's engine of the " \
           "unfused model)" in events
    assert any(e.startswith("the original model ships unchanged: every attempt failed "
                            "validation") for e in events)
    # What ships is what its user runs today: the upload's bytes at ONNX Runtime's default level.
    names = {a["name"] for a in job["artifacts"]}
    assert "engine.onnx" in names and not names & {"engine.xml", "engine.bin"}
    assert embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/engine.onnx").content == uploaded
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert (manifest["backend"], manifest["original"]) == ("onnxruntime", True)
    assert job["outcome"]["shipped"]["what"] == "original"


def test_an_openvino_job_times_its_ablation_and_its_batch_sweep(embedded: EmbeddedWorker
                                                                ) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=33)), "cnn.onnx")

    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", intra_op_threads=1, ablation=True,
        input_shapes={"input": [2, 3, 32, 32]},
        benchmark={**FAST_BENCHMARK, "batch_sizes": [1, 4]}))

    assert job["status"] == "succeeded", job["error"]
    suites = {(b["suite"], b["variant"], b["batch_size"]) for b in job["benchmarks"]}
    assert {("sweep", "engine", 1), ("sweep", "engine", 4)} <= suites, suites
    ablation = {variant for suite, variant, _ in suites if suite == "ablation"}
    assert {"none", "all"} <= ablation, suites


def test_an_openvino_int8_job_quantizes_with_nncf_judged_and_timed_in_openvino(
        embedded: EmbeddedWorker) -> None:
    model = conv_stack(seed=35)
    model_id = embedded.upload(model_bytes(model), "convnet.onnx")
    buffer = io.BytesIO()
    np.savez(buffer, input=calibration_images(model, 10, seed=3))
    calibration = embedded.client.post("/v1/datasets", params={"role": "calibration"},
                                       files={"file": ("cal.npz", buffer.getvalue())}).json()

    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", precision="int8", intra_op_threads=1,
        quantization={"mode": "static", "calibration": calibration["id"]},
        benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    report = job["accuracy_report"]["quantization"]
    tried = report["tried"]
    assert tried and all("openvino-nncf" in t["label"] for t in tried), tried
    assert not any(t.get("mode") == "dynamic" for t in tried)  # OpenVINO has no dynamic form
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert manifest["backend"] == "openvino" and manifest["inference_precision"] == "f32"
    if report["shipped"] == "int8":  # faster in OpenVINO on this CPU, as timed there
        assert {"u8", "i8"} & set(manifest["runtime_precisions"]), manifest
        precisions = report["node_precisions"]
        assert precisions and "int8" in str(precisions)
    else:  # not faster: the fp32 IR ships and the report says why
        assert report["why"]
        assert not {"u8", "i8"} & set(manifest["runtime_precisions"])
    assert job["outcome"]["shipped"]["backend"] == "openvino"


def test_an_openvino_search_races_its_precisions_and_ships_one(embedded: EmbeddedWorker
                                                               ) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=34)), "cnn.onnx")

    job = embedded.wait(embedded.submit(
        model_id, backend="openvino", input_shapes={"input": [2, 3, 32, 32]},
        search={"backends": ["openvino"], "time_budget_s": 60, "pass_sets": False},
        benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    rows = {row["name"]: row for row in report["rows"]}
    assert "fp32/all" in rows, report
    refusal = cpu_refusal(Precision.BF16)
    if refusal is None:
        assert "bf16/all" in rows, report
    else:  # this worker's CPU lacks bf16: the report says so instead of shipping f32 called bf16
        assert rows["bf16"]["outcome"] == "refused" and rows["bf16"]["reason"] == refusal, report
    if report["winner"] is None:  # on a model this small OpenVINO may not beat the original
        assert job["outcome"]["shipped"]["what"] == "original", job["outcome"]
        # what its user runs today: the upload at ONNX Runtime's default level
        assert job["outcome"]["shipped"]["backend"] == "onnxruntime", job["outcome"]
        manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
        assert manifest["backend"] == "onnxruntime"
    else:
        assert report["winner"] in rows and report["recipe"]["backend"] == "openvino"
        assert job["outcome"]["shipped"]["backend"] == "openvino"
