"""A finished job's benchmark records say where they ran and what they moved, and the job
keeps an SVG plot of its latencies that the API serves as an image, script-proof."""

from __future__ import annotations

import math
import uuid
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from core.db.models import BenchmarkRecord
from optimizer.measure.traffic import ModelTraffic
from optimizer.testing.models import model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker, job_run
from worker.pipeline.records.benchmark_context import fill_context
from worker.pipeline.records.benchmark_plots import SWEEP_PLOT, benchmark_plots
from worker.pipeline.results import BenchmarkContext
from worker.runtime import use_runtime

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


def test_records_use_the_bandwidth_their_worker_measured_at_start(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(small_cnn(seed=33)), "cnn.onnx")
    with use_runtime(replace(embedded.runtime, memory_bandwidth_gb_s=50.0)):
        job = embedded.wait(embedded.submit(model_id, input_shapes={"input": [1, 3, 32, 32]},
                                            benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    for record in job["benchmarks"]:
        assert record["environment"]["memory_bandwidth_gb_s"] == 50.0
        assert math.isclose(record["bandwidth_fraction"], record["achieved_gb_s"] / 50.0)


def _record(suite: str, variant: str, batch: int, p50: float) -> BenchmarkRecord:
    return BenchmarkRecord(job_id=uuid.uuid4(), suite=suite, variant=variant, backend="onnxruntime",
                           batch_size=batch, iterations=3, warmup=1, latency_ms_p50=p50,
                           latency_ms_p90=p50, latency_ms_p99=p50, latency_ms_mean=p50,
                           throughput_per_s=batch * 1000 / p50, peak_memory_mb=None,
                           speedup_vs_reference=None)


def test_sweep_records_count_inputs_and_outputs_at_their_own_batch() -> None:
    context = BenchmarkContext({"cpu": "X", "memory_bandwidth_gb_s": 10.0},
                               traffic={"engine": ModelTraffic(1000, 100)})
    small, large, unknown = fill_context(
        [_record("sweep", "engine", 1, 1.0), _record("sweep", "engine", 8, 2.0),
         _record("sweep", "mystery", 1, 1.0)], context)

    assert (small.bytes_per_inference, large.bytes_per_inference) == (1100, 1800)
    assert math.isclose(large.achieved_gb_s, 1800 / 2e-3 / 1e9)
    assert math.isclose(large.bandwidth_fraction, large.achieved_gb_s / 10.0)
    assert unknown.bytes_per_inference is None and unknown.environment_key == small.environment_key


def test_sweep_records_get_a_plot_of_latency_and_throughput_by_batch(tmp_path: Path) -> None:
    run = job_run(tmp_path, small_cnn(seed=34), {"backend": "onnxruntime"})
    records = [_record("sweep", variant, batch, p50) for variant, scale in
               (("original", 2.0), ("engine", 1.0)) for batch, p50 in
               ((1, 1.0 * scale), (4, 3.0 * scale), (16, 10.0 * scale))]

    [plot] = benchmark_plots(run, records)
    root = ET.fromstring(plot.path.read_bytes())
    points = root.findall(f".//{SVG}circle[@class='point']")

    assert plot.name == SWEEP_PLOT and plot.kind == "plot"
    assert len(points) == 2 * 2 * 3  # latency and throughput, two variants, three batches
    assert {p.get("data-x") for p in points} == {"1", "4", "16"}
