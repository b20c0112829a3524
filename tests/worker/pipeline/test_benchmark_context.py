"""A finished job's benchmark records say where they ran and what they moved, and the job
keeps an SVG plot of its latencies that the API serves as an image, script-proof."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from optimizer.testing.models import model_bytes, small_cnn
from tests.worker.pipeline.conftest import EmbeddedWorker

FAST_BENCHMARK = {"warmup": 1, "iterations": 5, "measure_memory": False}
SVG = "{http://www.w3.org/2000/svg}"


def test_every_record_carries_environment_traffic_and_bandwidth_context(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=31)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, input_shapes={"input": [2, 3, 32, 32]},
                                        benchmark=FAST_BENCHMARK, ablation=True))

    assert job["status"] == "succeeded", job["error"]
    records = job["benchmarks"]
    assert {r["suite"] for r in records} == {"comparison", "ablation"}
    keys = {r["environment_key"] for r in records}
    assert len(keys) == 1 and len(keys.pop()) == 16
    for record in records:
        env = record["environment"]
        assert env["worker"] == job["worker"] and env["onnxruntime"] and env["cpu_cores"] >= 1
        assert env["memory_bandwidth_gb_s"] > 0
        assert record["bytes_per_inference"] > 2 * 3 * 32 * 32 * 4  # the input alone, at least
        assert record["achieved_gb_s"] > 0
        assert 0 < record["bandwidth_fraction"] < 10, record


def test_the_latency_plot_is_an_svg_artifact_served_as_an_image_with_a_csp(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=32)), "cnn.onnx")
    job = embedded.wait(embedded.submit(model_id, input_shapes={"input": [1, 3, 32, 32]},
                                        benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    [plot] = [a for a in job["artifacts"] if a["name"] == "latency_distribution.svg"]
    assert plot["kind"] == "plot"
    response = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/latency_distribution.svg")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.headers["content-security-policy"] == (
        "default-src 'none'; style-src 'unsafe-inline'")
    assert response.headers["content-disposition"].startswith("attachment")
    root = ET.fromstring(response.content)
    bars = root.findall(f".//{SVG}rect[@class='bar']")
    assert {bar.get("data-series") for bar in bars} == {"original", "engine"}
    assert all(float(bar.get("data-value", "-1")) >= 0 for bar in bars)
