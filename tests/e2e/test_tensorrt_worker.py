"""A GPU worker end to end on PostgreSQL, Redis, a real Celery worker and the API, with
FakeTensorRT (tests/support/fake_tensorrt.py) in place of TensorRT and the GPU, which cannot
exist here: routing to the GPU queue, the isolated build with its progress and log relayed to
the job, the timing cache kept between builds, the engine report, validation and benchmarking
of the engine against TensorRT's engine of the unfused model, plugins, fallback, and a build
that crashes, hangs or is cancelled failing only its own job."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from optimizer.testing.models import model_bytes, small_cnn
from optimizer.testing.real_models import bert_encoder
from tests.e2e.flows import upload
from tests.e2e.stacks import running_stack
from tests.support.broker import redis_url
from tests.support.fake_tensorrt import FAKE_GPU
from tests.support.processes import wait_for_job

pytestmark = pytest.mark.e2e

E2E_REDIS_URL = redis_url("e2e-tensorrt")
BUILD_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("e2e-trt")
    control = tmp / "fake-tensorrt.json"
    with running_stack(tmp, name="trt", redis_url=E2E_REDIS_URL, queues="gpu",
                       FUSEFORGE_TENSORRT_TOOLKIT="tests.support.fake_tensorrt:FAKE_TENSORRT",
                       FUSEFORGE_JOBS__TRT_BUILD_TIMEOUT_S=str(BUILD_TIMEOUT_S),
                       FUSEFORGE_JOBS__HEARTBEAT_INTERVAL_S="1",
                       FAKE_TENSORRT_CONTROL=str(control)) as running:
        yield {"base_url": running.base_url, "data_dir": running.data_dir, "control": control,
               "worker": running.worker}


def _fake(stack: dict[str, Any], **control: Any) -> None:
    """Tell FakeTensorRT how the next builds behave (see its module docstring)."""
    Path(stack["control"]).write_text(json.dumps(control))


def _submit(base_url: str, model_id: str, **config: Any) -> str:
    body = {"model_id": model_id, "backend": "tensorrt",
            "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False}, **config}
    created = httpx.post(f"{base_url}/v1/jobs", json=body, timeout=30)
    assert created.status_code == 202, created.text
    return str(created.json()["id"])


def _cnn_job(stack: dict[str, Any], seed: int, **config: Any) -> dict[str, Any]:
    uploaded = upload(stack["base_url"], model_bytes(small_cnn(seed=seed)), "cnn.onnx")
    job_id = _submit(stack["base_url"], uploaded["id"],
                     input_shapes={"input": [2, 3, 32, 32]}, **config)
    return wait_for_job(stack["base_url"], job_id)


def test_tensorrt_job_builds_validates_and_benchmarks_on_the_gpu_worker(
        stack: dict[str, Any]) -> None:
    _fake(stack)
    job = _cnn_job(stack, seed=11)
    assert job["status"] == "succeeded", job["error"]
    assert job["worker"] and job["progress"] == 1.0

    artifacts = {a["name"] for a in job["artifacts"]}
    assert artifacts == {"engine.plan", "metadata.json", "engine_report.json", "build.log",
                         "fused.onnx", "fusion_report.json", "latency_distribution.svg",
                         "report.html"}
    report = job["engine_report"]
    metadata = report["metadata"]
    assert metadata["gpu_name"] == FAKE_GPU.name and metadata["compute_capability"] == "9.0"
    assert metadata["precision"] == "fp32" and metadata["plugins"] == []
    assert metadata["profiles"] == [{"input": {"min": [2, 3, 32, 32], "opt": [2, 3, 32, 32],
                                               "max": [2, 3, 32, 32]}}]
    assert metadata["build_seconds"] >= 0 and metadata["engine_bytes"] > 0
    assert report["layers"]["layers"] > 0 and report["layers"]["onnx_nodes_in_layers"] > 0
    assert report["reference_engine"]["precision"] == "fp32"
    # The reference is TensorRT's engine of the unfused model, built from more nodes.
    assert report["reference_engine"]["engine_bytes"] != metadata["engine_bytes"]

    assert job["validation"]["passed"] is True
    variants = {b["variant"]: b for b in job["benchmarks"]}
    assert set(variants) == {"original", "engine"}
    assert all(b["backend"] == "fake-tensorrt" for b in variants.values())
    # Both on the engine runners' own clock, with the memory each engine held.
    assert all(b["timing"] == "fake_device_clock" for b in variants.values())
    assert all(b["device_memory_mb"] > 0 for b in variants.values())

    messages = [e["message"] for e in job["events"]]
    assert any(m.startswith("TensorRT build warning: [FakeTensorRT] no kernels are timed")
               for m in messages)
    log = httpx.get(f"{stack['base_url']}/v1/jobs/{job['id']}/artifacts/build.log",
                    timeout=10).text
    assert "[INFO] [FakeTensorRT] parsing" in log
    caches = list((stack["data_dir"] / "artifacts" / "timing-caches").iterdir())
    assert [c.name for c in caches] == ["trt-10.16.1.11-fake_sm90_fakegpu-no-hardware.timing-cache"]


def test_second_build_of_a_similar_model_starts_from_the_stored_timing_cache(
        stack: dict[str, Any]) -> None:
    _fake(stack)
    first = _cnn_job(stack, seed=12)
    second = _cnn_job(stack, seed=13)
    assert first["status"] == second["status"] == "succeeded"
    assert second["engine_report"]["metadata"]["timing_cache_warm"] is True
    # A GPU worker runs each job in a fresh pool process (CUDA errors are sticky per process).
    assert first["worker"] != second["worker"]


def test_plugins_reach_the_engine_and_fp16_is_validated_on_the_engine(
        stack: dict[str, Any]) -> None:
    _fake(stack)
    model = bert_encoder(layers=1, hidden=64, heads=2, seq=16, seed=7)
    uploaded = upload(stack["base_url"], model_bytes(model), "bert.onnx")
    job_id = _submit(stack["base_url"], uploaded["id"], precision="fp16",
                     input_ranges={"input_ids": [0, 1000], "attention_mask": [-1.0, 0.0]})
    job = wait_for_job(stack["base_url"], job_id)
    assert job["status"] == "succeeded", job["error"]
    assert set(job["engine_report"]["metadata"]["plugins"]) >= {"SkipLayerNorm", "BiasGelu"}
    assert job["engine_report"]["metadata"]["precision"] == "fp16"
    evaluation = job["accuracy_report"]["precision_evaluation"]
    assert evaluation["method"] == "backend"
    assert evaluation["backend"] == "fake-tensorrt"


def test_fallback_rebuilds_the_engine_without_the_blamed_rule(stack: dict[str, Any]) -> None:
    _fake(stack)
    # Folding BN into the conv changes the last bits; nothing else in this CNN does, and
    # FakeTensorRT's engine computes the graph as written.
    job = _cnn_job(stack, seed=14, on_validation_failure="fallback",
                   validation={"atol": 1e-12, "rtol": 0})
    assert job["status"] == "succeeded", job["error"]
    report = job["accuracy_report"]
    assert report["passed_first_time"] is False
    assert ["FoldBatchNormIntoConv"] in report["bisection"]["culprits"]
    assert report["fallback"]["kept"] == "the job's passes without rule(s) FoldBatchNormIntoConv"
    assert job["validation"]["passed"] is True
    assert "BatchNormalization" in job["fusion_report"]["ops_after"]


@pytest.mark.parametrize(("fault", "expected"), [
    ("abort", "crashed: its child process was killed by signal SIGABRT"),
    ("error", "FakeTensorRT was asked to fail"),
    ("hang", f"did not finish within its time limit of {BUILD_TIMEOUT_S} s"),
])
def test_failing_build_fails_only_its_job(stack: dict[str, Any], fault: str,
                                          expected: str) -> None:
    _fake(stack, fault=fault)
    try:
        job = _cnn_job(stack, seed=15)
    finally:
        _fake(stack)
    assert job["status"] == "failed"
    assert job["error"]["code"] == "EngineBuildError" and expected in job["error"]["message"]
    assert job["artifacts"] == []
    assert _cnn_job(stack, seed=16)["status"] == "succeeded"  # the worker carries on


def test_cancelling_during_the_build_stops_it(stack: dict[str, Any]) -> None:
    _fake(stack, build_seconds=60)
    try:
        uploaded = upload(stack["base_url"], model_bytes(small_cnn(seed=17)), "cnn.onnx")
        job_id = _submit(stack["base_url"], uploaded["id"])
        deadline = time.monotonic() + 120
        while True:
            job = httpx.get(f"{stack['base_url']}/v1/jobs/{job_id}", timeout=10).json()
            if job["stage"] == "build_engine" and job["progress"] > 0.2:
                break  # the builder's progress reached the job
            assert time.monotonic() < deadline, f"the build never reported progress: {job}"
            time.sleep(0.2)
        cancelled_at = time.monotonic()
        assert httpx.post(f"{stack['base_url']}/v1/jobs/{job_id}/cancel",
                          timeout=10).status_code == 200
    finally:
        _fake(stack)
    assert _cnn_job(stack, seed=18)["status"] == "succeeded"
    assert time.monotonic() - cancelled_at < 50  # the 60 s build was stopped, not waited out
    job = httpx.get(f"{stack['base_url']}/v1/jobs/{job_id}", timeout=10).json()
    assert job["status"] == "cancelled" and job["artifacts"] == []


def test_profiles_build_one_engine_for_a_range_of_batch_sizes(stack: dict[str, Any]) -> None:
    _fake(stack)
    uploaded = upload(stack["base_url"], model_bytes(small_cnn(seed=19)), "cnn.onnx")
    profile = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [16, 3, 32, 32]}
    job = wait_for_job(stack["base_url"],
                       _submit(stack["base_url"], uploaded["id"], profiles={"input": profile}))
    assert job["status"] == "succeeded", job["error"]
    assert job["config"]["input_shapes"] == {"input": [4, 3, 32, 32]}  # validated at opt
    assert job["engine_report"]["metadata"]["profiles"] == [{"input": profile}]
    assert job["engine_report"]["reference_engine"]["profiles"] == [{"input": profile}]
    assert {b["batch_size"] for b in job["benchmarks"]} == {4}
    checks = job["accuracy_report"]["profile_checks"]
    assert checks["min"]["input_shapes"] == {"input": [1, 3, 32, 32]}
    assert checks["max"]["input_shapes"] == {"input": [16, 3, 32, 32]}
    assert checks["min"]["passed"] and checks["max"]["passed"]


def test_engine_wrong_only_at_large_batches_fails_at_the_profile_max(
        stack: dict[str, Any]) -> None:
    _fake(stack, corrupt_batches_above=8)
    try:
        uploaded = upload(stack["base_url"], model_bytes(small_cnn(seed=21)), "cnn.onnx")
        profile = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [16, 3, 32, 32]}
        job = wait_for_job(stack["base_url"], _submit(stack["base_url"], uploaded["id"],
                                                      profiles={"input": profile}))
    finally:
        _fake(stack)
    assert job["status"] == "failed"
    assert job["error"]["code"] == "AccuracyMismatchError"
    assert "at its profiles' max shapes (input [16, 3, 32, 32])" in job["error"]["message"]
    assert job["accuracy_report"]["profile_checks"]["min"]["passed"] is True
    assert job["accuracy_report"]["profile_checks"]["max"]["passed"] is False
    assert job["validation"]["passed"] is True  # the opt shape alone would have hidden it


def test_ablation_times_a_tensorrt_engine_per_fusion_stage(stack: dict[str, Any]) -> None:
    _fake(stack)
    job = _cnn_job(stack, seed=20, ablation=True)
    assert job["status"] == "succeeded", job["error"]
    stages = [b for b in job["benchmarks"] if b["suite"] == "ablation"]
    assert [b["variant"] for b in stages] == ["none", "conv_bn_act", "add_relu", "matmul_gemm",
                                              "all"]
    assert all(b["backend"] == "fake-tensorrt" for b in stages)
    builds = [e["message"] for e in job["events"] if e["stage"] == "ablation"
              and "TensorRT build of ablation stage" in e["message"]]
    assert len(builds) == 5  # one engine per stage (each logs FakeTensorRT's warning)


def test_the_gpu_worker_is_listed_online_with_its_gpu_queues(stack: dict[str, Any]) -> None:
    deadline = time.monotonic() + 60
    while not (workers := httpx.get(f"{stack['base_url']}/v1/workers",
                                    params={"online": "true"}, timeout=10).json()):
        assert time.monotonic() < deadline, "the worker never recorded itself"
        time.sleep(0.2)
    [worker] = workers
    assert worker["gpu_name"] == FAKE_GPU.name and worker["compute_capability"] == "9.0"
    assert {"gpu", "gpu.sm90"} <= set(worker["queues"]) and "cpu" not in worker["queues"]


def test_a_crash_while_running_the_engine_fails_the_job_at_once(stack: dict[str, Any]) -> None:
    _fake(stack, crash_inference=True)
    try:
        started = time.monotonic()
        job = _cnn_job(stack, seed=22)
    finally:
        _fake(stack)
    assert job["status"] == "failed"
    assert time.monotonic() - started < 120  # not left to the 15-minute stale sweep
    assert job["error"]["code"] == "WorkerProcessDied"
    assert "died in stage 'validate' before the job finished" in job["error"]["message"]
    assert job["artifacts"] == []
    assert not (stack["data_dir"] / "scratch" / job["id"]).exists()
    assert _cnn_job(stack, seed=23)["status"] == "succeeded"  # the worker carries on
