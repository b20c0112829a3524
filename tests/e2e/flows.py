"""The user's flow, shared by the end-to-end tests: upload, optimize, check every record."""

import io

import httpx
import numpy as np
import onnxruntime as ort

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.processes import wait_for_job

__all__ = ["assert_optimize_flow_succeeds", "upload"]


def upload(base_url: str, data: bytes, filename: str = "model.onnx") -> dict:  # type: ignore[type-arg]
    response = httpx.post(f"{base_url}/v1/models", files={"file": (filename, data)}, timeout=60)
    assert response.status_code in (200, 201), response.text
    return response.json()  # type: ignore[no-any-return]


def assert_optimize_flow_succeeds(base_url: str) -> dict:  # type: ignore[type-arg]
    """Upload a CNN, run a job, and check validation, benchmarks and the downloadable engine."""
    original = model_bytes(small_cnn(seed=3))
    model = upload(base_url, original, "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": model["id"], "backend": "onnxruntime", "precision": "fp32",
              "input_shapes": {"input": [2, 3, 32, 32]},
              "benchmark": {"warmup": 2, "iterations": 10}},
        timeout=30,
    )
    assert created.status_code == 202, created.text
    job = wait_for_job(base_url, created.json()["id"])

    assert job["status"] == "succeeded", job
    assert job["error"] is None and job["progress"] == 1.0 and job["stage"] == "done"
    assert [e["stage"] for e in job["events"] if e["message"].startswith("stage ")] == [
        "load", "optimize", "build_engine", "validate", "benchmark", "profile", "store"
    ]
    assert job["validation"]["passed"] is True
    assert [o["name"] for o in job["validation"]["outputs"]] == ["logits"]
    assert job["validation"]["outputs"][0]["samples"] == 8
    variants = {b["variant"]: b for b in job["benchmarks"]}
    assert set(variants) == {"original", "original_unoptimized", "engine"}
    for record in variants.values():
        assert record["batch_size"] == 2 and record["iterations"] == 10
        assert 0 < record["latency_ms_p50"] <= record["latency_ms_p99"]
        assert record["throughput_per_s"] > 0
    assert variants["original"]["speedup_vs_reference"] is None
    assert variants["engine"]["speedup_vs_reference"] > 0

    artifacts = {a["name"]: a for a in job["artifacts"]}
    assert set(artifacts) == {"engine.onnx", "manifest.json", "fused.onnx", "fusion_report.json",
                              "latency_distribution.svg", "report.html"}
    report = job["fusion_report"]
    assert report["ops_before"]["BatchNormalization"] == 2
    assert "BatchNormalization" not in report["ops_after"]
    assert report["nodes_after"] < report["nodes_before"]
    assert any(r["rule"] == "FoldBatchNormIntoConv" and r["applied"] == 2 for r in report["rules"])
    engine_bytes = httpx.get(f"{base_url}{artifacts['engine.onnx']['url']}", timeout=30).content
    assert len(engine_bytes) == artifacts["engine.onnx"]["size_bytes"]
    manifest = httpx.get(f"{base_url}{artifacts['manifest.json']['url']}", timeout=30).json()
    assert manifest["backend"] == "onnxruntime"

    feed = {"input": np.random.default_rng(7).standard_normal((2, 3, 32, 32), np.float32)}
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(original, plain, providers=["CPUExecutionProvider"]).run(None, feed)
    engine = ort.InferenceSession(io.BytesIO(engine_bytes).getvalue(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(engine.run(None, feed)[0], expected[0], atol=1e-4, rtol=1e-3)
    return job
