"""End to end on the production parts: PostgreSQL, Redis, a real Celery worker and the API server."""

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from celery import Celery
from onnx import TensorProto, helper

from optimizer.testing.models import model_bytes, small_cnn
from tests.e2e.flows import assert_optimize_flow_succeeds, upload
from tests.e2e.stacks import running_stack
from tests.support.broker import redis_url
from tests.support.processes import wait_for_job

pytestmark = pytest.mark.e2e

E2E_REDIS_URL = redis_url("e2e-postgres-redis")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Migrated database, a worker on the cpu queue and the API, as separate processes."""
    with running_stack(tmp_path_factory.mktemp("e2e"), name="cpu", redis_url=E2E_REDIS_URL,
                       queues="cpu") as running:
        yield {"base_url": running.base_url, "broker_url": E2E_REDIS_URL,
               "data_dir": str(running.data_dir)}


def test_uploaded_cnn_is_optimized_validated_and_benchmarked(stack: dict[str, str]) -> None:
    assert_optimize_flow_succeeds(stack["base_url"])


def test_redelivered_message_does_not_run_a_finished_job_again(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    job = assert_optimize_flow_succeeds(base_url)
    # The broker delivers the same job id again, as Redis does after a visibility timeout.
    Celery(broker=stack["broker_url"]).send_task("jobs.run", args=[job["id"]], queue="cpu")
    # The worker takes one message at a time, so a job sent after it finishes after it.
    later = assert_optimize_flow_succeeds(base_url)
    again = httpx.get(f"{base_url}/v1/jobs/{job['id']}", timeout=10).json()
    assert later["status"] == "succeeded"
    assert again["attempts"] == 1 and again["status"] == "succeeded"
    assert again["events"] == job["events"]


def test_model_the_backend_cannot_run_fails_with_a_clear_error_and_no_artifacts(
    stack: dict[str, str],
) -> None:
    base_url = stack["base_url"]
    # Valid ONNX (Relu takes int16 since opset 14) that ONNX Runtime has no CPU kernel for: the
    # upload check passes it; the load stage, which loads every model it writes, names the op.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT16, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    uploaded = upload(base_url, model.SerializeToString(), "mystery.onnx")
    created = httpx.post(f"{base_url}/v1/jobs", json={"model_id": uploaded["id"]}, timeout=30)
    job = wait_for_job(base_url, created.json()["id"])

    assert job["status"] == "failed"
    assert job["error"]["code"] == "UnsupportedModelError"
    assert "ONNX Runtime cannot load" in job["error"]["message"]
    assert "Relu" in job["error"]["message"]
    assert job["artifacts"] == [] and job["benchmarks"] == []
    assert not (Path(stack["data_dir"]) / "artifacts" / "jobs" / job["id"]).exists()
    assert not (Path(stack["data_dir"]) / "scratch" / job["id"]).exists()


def test_engine_outside_tolerance_fails_the_job_and_keeps_the_validation_records(
    stack: dict[str, str],
) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=5)), "cnn.onnx")
    # Folding BatchNorm into Conv reorders float arithmetic: equal to ~1e-6, never to 1e-12.
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": uploaded["id"], "validation": {"atol": 1e-12, "rtol": 0}},
        timeout=30,
    )
    job = wait_for_job(base_url, created.json()["id"])

    assert job["status"] == "failed"
    assert job["error"]["code"] == "AccuracyMismatchError"
    assert "'logits'" in job["error"]["message"] and "atol=1e-12" in job["error"]["message"]
    assert job["validation"]["passed"] is False
    [output] = job["validation"]["outputs"]
    assert output["max_abs_err"] > 1e-12 and output["passed"] is False
    assert job["artifacts"] == [] and job["benchmarks"] == []
    assert not (Path(stack["data_dir"]) / "artifacts" / "jobs" / job["id"]).exists()
    # Bisection blamed a rewrite rule: at 1e-12 even an exact-in-theory BN fold differs.
    culprits = job["accuracy_report"]["bisection"]["culprits"]
    assert culprits and "break equivalence" in job["accuracy_report"]["blame"]
    localization = job["accuracy_report"]["localization"]
    assert localization["node"] and "First divergence" in job["error"]["message"]


def test_fallback_ships_the_original_when_no_attempt_validates(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=9)), "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": uploaded["id"], "on_validation_failure": "fallback",
              "validation": {"atol": 1e-12, "rtol": 0, "samples": 2},
              "benchmark": {"warmup": 1, "iterations": 3, "measure_memory": False}},
        timeout=30,
    )
    job = wait_for_job(base_url, created.json()["id"])

    # No rewrite meets atol=1e-12, so the last resort ships: the upload itself at ONNX
    # Runtime's default level (it used to be the reference itself, slower than the original).
    assert job["status"] == "succeeded", job["error"]
    report = job["accuracy_report"]
    assert report["passed_first_time"] is False
    assert report["original_shipped"].startswith("every attempt failed validation")
    assert report["fallback"]["kept"] and report["fallback"]["first_failure"]["passed"] is False
    assert {a["name"] for a in job["artifacts"]} >= {"engine.onnx", "fused.onnx"}


def test_cancelling_a_running_job_stops_it_and_leaves_no_artifacts(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=6)), "cnn.onnx")
    slow = {"benchmark": {"warmup": 0, "iterations": 5000, "measure_memory": False}}
    job_id = httpx.post(
        f"{base_url}/v1/jobs", json={"model_id": uploaded["id"], **slow}, timeout=30
    ).json()["id"]
    deadline = time.monotonic() + 120
    while httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=10).json()["status"] != "running":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)

    cancelled = httpx.post(f"{base_url}/v1/jobs/{job_id}/cancel", timeout=10)
    assert cancelled.status_code == 200, cancelled.text
    # The worker runs one job at a time: once the next job is done, the cancelled one has ended.
    assert_optimize_flow_succeeds(base_url)

    job = httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=10).json()
    assert job["status"] == "cancelled" and job["error"] is None
    assert job["artifacts"] == [] and job["benchmarks"] == []
    assert not (Path(stack["data_dir"]) / "artifacts" / "jobs" / job_id).exists()
    assert not (Path(stack["data_dir"]) / "scratch" / job_id).exists()


def test_ablation_benchmarks_each_fusion_stage_cumulatively(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=8)), "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": uploaded["id"], "ablation": True,
              "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False}},
        timeout=30,
    )
    job = wait_for_job(base_url, created.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    ablation = [b for b in job["benchmarks"] if b["suite"] == "ablation"]
    assert [b["variant"] for b in ablation] == ["none", "conv_bn_act", "add_relu", "matmul_gemm", "all"]
    assert ablation[0]["speedup_vs_reference"] is None
    assert all(isinstance(b["slower_than_previous"], bool) for b in ablation[1:])
    comparison = [b["variant"] for b in job["benchmarks"] if b["suite"] == "comparison"]
    assert sorted(comparison) == ["engine", "original", "original_unoptimized"]


def test_fp16_job_converts_the_graph_and_validates_it_by_emulation(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=10)), "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": uploaded["id"], "precision": "fp16",
              "benchmark": {"warmup": 1, "iterations": 3, "measure_memory": False}},
        timeout=30,
    )
    job = wait_for_job(base_url, created.json()["id"])

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    assert job["validation"]["outputs"][0]["atol"] == 1e-2  # fp16 tolerances
    report = job["accuracy_report"]
    assert report["precision"]["precision"] == "fp16"
    assert report["precision_evaluation"]["method"] == "emulated"
    assert "model.fp16.onnx" in {a["name"] for a in job["artifacts"]}


def test_precision_search_reports_the_budget_and_what_it_kept(stack: dict[str, str]) -> None:
    base_url = stack["base_url"]
    uploaded = upload(base_url, model_bytes(small_cnn(seed=11)), "cnn.onnx")
    created = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model_id": uploaded["id"], "precision": "fp16", "precision_search": True,
              "accuracy_budget": {"min_cosine": 0.9999},
              "benchmark": {"warmup": 1, "iterations": 3, "measure_memory": False}},
        timeout=30,
    )
    job = wait_for_job(base_url, created.json()["id"])

    assert job["status"] == "succeeded", job["error"]
    search = job["accuracy_report"]["precision_search"]
    assert search["within_budget"] is True
    assert search["accuracy"]["cosine"] >= 0.9999
    assert search["evaluations"] >= 1 and "kept_fp32_nodes" in search
