"""Search jobs end to end on a real worker (embedded, on the Redis broker): the candidates
recorded as they are judged, the race's Pareto table, the winner shipped as the job's engine
with the recipe that rebuilds it (or the original, when no candidate beat it, with the int8
search stopped early), the original raced at each thread count, and the refusals of a search
config that asks for two things."""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from markupsafe import escape
from sqlalchemy import select

from core.db.models import SearchCandidate
from optimizer.testing.models import model_bytes
from optimizer.testing.quantization_models import calibration_images, conv_stack
from tests.support.embedded_worker import EmbeddedWorker

FAST = {"benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}


def _refusal(embedded: EmbeddedWorker, model_id: str, **config: Any) -> str:
    response = embedded.client.post("/v1/jobs", json={"model_id": model_id, **config})
    assert response.status_code == 422, response.text
    return str(response.json()["detail"])


def _convnet(seed: int) -> onnx.ModelProto:
    return conv_stack(seed=seed, channels=16, size=16, blocks=1)


def test_a_search_config_that_asks_for_two_things_is_refused_naming_the_field(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(1)), "convnet.onnx")

    assert _refusal(embedded, model_id, precision="int8", search={}).startswith("precision:")
    assert _refusal(embedded, model_id, passes="none", search={}).startswith("passes:")
    assert _refusal(embedded, model_id, search={"strategy": "min_latency_under_budget"}
                    ).startswith("search.latency_budget_ms:")
    assert _refusal(embedded, model_id, search={"precisions": ["bf16"]}
                    ).startswith("search.precisions:")
    assert _refusal(embedded, model_id, search={"time_budget_s": 1}).startswith("search")
    assert _refusal(embedded, model_id, backend="tensorrt", search={"threads": [1]}
                    ).startswith("search.threads: applies to backend 'onnxruntime'")
    assert _refusal(embedded, model_id, ort_intra_op_threads=2, search={"threads": [1]}
                    ).startswith("ort_intra_op_threads:")


def test_a_search_job_races_its_candidates_and_ships_what_beat_the_original(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(2)), "convnet.onnx")
    job = embedded.wait(embedded.submit(model_id, search={"backends": ["onnxruntime"],
                                                          "time_budget_s": 120}, **FAST))

    assert job["status"] == "succeeded", job.get("error")
    report = job["search_report"]
    rows = {row["name"]: row for row in report["rows"]}
    assert "fp32/all" in rows and "fp32/none" in rows
    assert any(name.startswith("fp32/without-") for name in rows)
    # int8 static without a calibration dataset: refused with the reason, not silently left out
    assert rows["int8-static"]["outcome"] == "refused"
    assert "calibration" in rows["int8-static"]["reason"]
    for row in rows.values():
        assert row["outcome"] in {"won", "slower", "out_of_accuracy_budget", "refused",
                                  "failed", "not_tried"}, row
        if row["outcome"] != "won":
            assert row["reason"], row
    raced = [row for row in rows.values() if "latency_ms_p50" in row]
    assert raced and all(row["latency_ms_p50_ci"][0] <= row["latency_ms_p50"]
                         <= row["latency_ms_p50_ci"][1] for row in raced)
    assert any(row["pareto"] for row in raced)
    assert job["config"]["search"]["time_budget_s"] == 120
    assert any(a["kind"] == "engine" for a in job["artifacts"])
    page = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/report.html").text
    outcome = job["outcome"]
    assert outcome["asked"]["search"] is True and str(escape(outcome["headline"])) in page
    # ONNX Runtime fuses this small convnet as well as the passes do: a candidate wins only
    # faster than the original beyond its interval, else the original ships (either way,
    # saying so consistently).
    if report["winner"] is None:
        assert report["original"] and report["recipe"] is None
        assert outcome["shipped"]["what"] == "original"
        assert outcome["headline"].startswith(
            "Shipped your original model unchanged (search asked): no candidate beat the "
            "original")
        assert "<strong>Your original model</strong> won" in page
    else:
        won = rows[report["winner"]]
        assert won["outcome"] == "won" and won["speedup_ci"][0] > 1.01
        assert report["recipe"]["precision"] == won["precision"] and "search" not in report[
            "recipe"]
        assert outcome["headline"].startswith(
            f"Shipped the {report['recipe']['backend']} {report['recipe']['precision']} "
            "engine (search asked): ")
        assert outcome["why"].startswith(f"the search shipped {report['winner']}")
        assert '<section id="search">' in page and report["winner"] in page
    with embedded.runtime.sessions() as session:
        recorded = session.scalars(select(SearchCandidate.name).where(
            SearchCandidate.job_id == uuid.UUID(job["id"]))).all()
    assert set(recorded) == {name for name, row in rows.items() if row["outcome"] != "refused"}


def test_a_search_whose_candidates_all_lose_ships_the_original_and_int8_stops_early(
        embedded: EmbeddedWorker) -> None:
    # A budget no int8 form of this small convnet meets: int8 stops early either way, timed
    # no faster than fp32 (on a model this small, often) or, faster, once keeping nodes in
    # float shows a pace that cannot reach it. No fp32 candidate: on a model this small its
    # fixed shapes can make it a percent or two faster than the original, or not (the
    # decision's tests cover ties).
    model = conv_stack(seed=12, channels=16, size=16, blocks=4)
    model_id = embedded.upload(model_bytes(model), "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, search={"backends": ["onnxruntime"], "precisions": ["int8"], "time_budget_s": 120},
        accuracy_budget={"min_cosine": 0.99999999},
        quantization={"calibration": _calibration(embedded, model)}, **FAST))

    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    assert report["winner"] is None and report["recipe"] is None
    assert report["original"].startswith("no candidate reached the race to beat the original (")
    assert report["original"].endswith("; the original ships unchanged")
    rows = {row["name"]: row for row in report["rows"]}
    static = rows["int8-static/all"]
    assert static["outcome"] in {"slower", "out_of_accuracy_budget"}, static
    assert "so the search stopped early" in static["reason"], static
    # int8 dynamic: not tried after static lost on speed, or out of this budget too
    assert not any("latency_ms_p50" in row for row in rows.values()), rows
    outcome = job["outcome"]
    assert outcome["shipped"]["what"] == "original"
    assert outcome["why"].startswith("no candidate reached the race to beat the original")
    messages = [event["message"] for event in job["events"]]
    assert any("int8: stopped early: " in m for m in messages), messages
    assert any(m.startswith("search: the original: no candidate reached the race")
               for m in messages), messages
    assert any(a["kind"] == "engine" for a in job["artifacts"])
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert manifest["intra_op_threads"] is None  # the original at ONNX Runtime's default


def test_cancel_stops_a_search_between_candidates_and_keeps_what_it_recorded(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(3)), "convnet.onnx")
    job_id = embedded.submit(model_id, search={"backends": ["onnxruntime"], "precisions": ["fp32"],
                                               "time_budget_s": 300},
                             validation={"samples": 128})
    deadline = time.monotonic() + 120
    while not any(e["message"].startswith("candidate fp32/all: timed")
                  for e in embedded.job(job_id)["events"]):
        assert time.monotonic() < deadline, "the search never judged its first candidate"
        time.sleep(0.02)
    assert embedded.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    after = embedded.wait(embedded.submit(model_id, **FAST))  # the worker takes its next job
    assert after["status"] == "succeeded", after["error"]

    job = embedded.job(job_id)
    assert job["status"] == "cancelled" and job["artifacts"] == []
    with embedded.runtime.sessions() as session:
        recorded = session.scalars(select(SearchCandidate.name).where(
            SearchCandidate.job_id == uuid.UUID(job_id))).all()
    assert "fp32/all" in recorded
    assert not (embedded.runtime.settings.scratch_dir / job_id).exists()


def test_a_search_with_no_candidate_within_the_latency_budget_fails_keeping_its_table(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(4)), "convnet.onnx")
    job = embedded.wait(embedded.submit(model_id, search={"backends": ["onnxruntime"],
        "strategy": "min_latency_under_budget", "latency_budget_ms": 1e-6,
        "precisions": ["fp32"], "pass_sets": False, "time_budget_s": 60}, **FAST))

    assert job["status"] == "failed" and job["error"]["code"] == "SearchFoundNothing"
    rows = job["search_report"]["rows"]
    assert rows and all(row["outcome"] == "over_latency_budget" for row in rows), rows
    assert all("latency budget" in row["reason"] for row in rows)
    assert job["artifacts"] == []


def _calibration(embedded: EmbeddedWorker, model: onnx.ModelProto) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, input=calibration_images(model, 6, seed=5))
    response = embedded.client.post("/v1/datasets", params={"role": "calibration"},
                                    files={"file": ("cal.npz", buffer.getvalue())})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def test_int8_out_of_the_accuracy_budget_loses_the_search_saying_so(
        embedded: EmbeddedWorker) -> None:
    model = _convnet(5)
    model_id = embedded.upload(model_bytes(model), "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, search={"backends": ["onnxruntime"], "precisions": ["int8", "fp32"], "pass_sets": False,
                          "time_budget_s": 120},
        quantization={"calibration": _calibration(embedded, model), "max_kept_nodes": 0},
        accuracy_budget={"min_cosine": 0.999999}, **FAST))

    assert job["status"] == "succeeded", job["error"]
    rows = {row["name"]: row for row in job["search_report"]["rows"]}
    static = rows["int8-static/all"]
    # Out of budget; or, timed first and no faster than fp32, it stopped early on speed.
    assert static["reason"].startswith("the fp32 model would ship: ")
    if static["outcome"] == "slower":
        assert "int8 cannot win here" in static["reason"]
    else:
        assert static["outcome"] == "out_of_accuracy_budget"
        assert "no int8 form met the accuracy budget" in static["reason"]
    # fp32 won, or (no faster than the original) the original shipped: never int8
    winner = job["search_report"]["winner"]
    assert winner is None or winner.startswith("fp32/")
    assert job["config"]["quantization"]["calibration"]  # kept on the search job
    assert (job["search_report"]["recipe"] or {"precision": "fp32"})["precision"] == "fp32"


def test_an_int8_candidate_faster_than_the_original_at_its_threads_ships_with_its_recipe(
        embedded: EmbeddedWorker) -> None:
    # 64 channels at 56x56: int8's kernels pay, at one intra-op thread surely (at two, on a
    # loaded host, a thread pool's wake-ups can hide the gain); raced against the original
    # at one thread too.
    model = conv_stack(seed=13)
    model_id = embedded.upload(model_bytes(model), "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, search={"backends": ["onnxruntime"], "precisions": ["int8"], "threads": [1],
                          "time_budget_s": 300},
        quantization={"calibration": _calibration(embedded, model)}, **FAST), timeout_s=300)

    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    rows = {row["name"]: row for row in report["rows"]}
    assert report["winner"] is not None and report["original"] is None, report["why"]
    won = rows[report["winner"]]
    assert won["outcome"] == "won" and won["speedup_ci"][0] > 1.01
    assert report["recipe"]["precision"] == "int8" and "search" not in report["recipe"]
    assert report["recipe"].get("ort_intra_op_threads") == (
        1 if report["winner"].endswith("@1t") else None)
    outcome = job["outcome"]
    assert outcome["shipped"]["what"] == "engine" and outcome["shipped"]["precision"] == "int8"
    assert outcome["why"].startswith(f"the search shipped {report['winner']}")


def test_the_time_budget_leaves_the_last_candidates_untried_and_says_so(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(conv_stack(seed=6, channels=64, size=56, blocks=4)),
                               "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, search={"backends": ["onnxruntime"], "precisions": ["fp32"], "time_budget_s": 10},
        validation={"samples": 128}), timeout_s=120)

    assert job["status"] == "succeeded", job["error"]
    rows = job["search_report"]["rows"]
    untried = [row for row in rows if row["outcome"] == "not_tried"]
    assert untried and all("time budget (10 s)" in row["reason"] for row in untried)
    assert rows[0]["outcome"] != "not_tried"  # the first candidate always gets its chance
    # one still building at 75% of the budget stops at its next step, not minutes later
    assert all(row["reason"].startswith(("not tried:", "not finished:")) for row in untried)
    # (No bound on elapsed_s: on a loaded host the race's 5 rounds alone can take 20 s.)


def test_thread_counts_asked_race_and_the_winners_count_is_in_its_engine(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(7)), "convnet.onnx")
    job = embedded.wait(embedded.submit(model_id, search={"backends": ["onnxruntime"],
        "precisions": ["fp32"], "pass_sets": False, "threads": [1], "time_budget_s": 60},
        **FAST))

    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    assert {row["name"] for row in report["rows"]} == {"fp32/all", "fp32/all@1t"}
    # the original raced at each thread count, each candidate against its own
    assert set(report["race"]["originals_ms_p50"]) == {"original", "original@1t"}
    manifest_url = f"/v1/jobs/{job['id']}/artifacts/manifest.json"
    manifest = embedded.client.get(manifest_url).json()
    expected = 1 if report["winner"] == "fp32/all@1t" else None
    assert (report["recipe"] or {}).get("ort_intra_op_threads") == expected
    assert manifest["intra_op_threads"] == expected


def test_a_plain_job_with_a_thread_count_builds_its_engine_with_it(
        embedded: EmbeddedWorker) -> None:
    model_id = embedded.upload(model_bytes(_convnet(8)), "convnet.onnx")
    job = embedded.wait(embedded.submit(model_id, ort_intra_op_threads=1, **FAST))

    assert job["status"] == "succeeded", job["error"]
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert manifest["intra_op_threads"] == 1


def test_a_tensorrt_search_races_on_the_gpu_worker_and_int8_losing_to_fp16_says_so(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    # FakeTensorRT (tests/support/fake_tensorrt.py) stands in for TensorRT and the GPU; its
    # int8 kernels are made to lose, so the int8 candidate's own step ships fp16.
    fake_tensorrt_control.write_text(json.dumps({"infer_delay_s": {"int8": 0.05}}))
    model = _convnet(9)
    model_id = embedded.upload(model_bytes(model), "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="tensorrt", quantization={"calibration": _calibration(embedded, model)},
        search={"precisions": ["int8", "fp16"], "pass_sets": False, "time_budget_s": 120},
        **FAST))

    assert job["status"] == "succeeded", job["error"]
    rows = {row["name"]: row for row in job["search_report"]["rows"]}
    assert rows["int8-static/all"]["outcome"] == "slower"
    assert rows["int8-static/all"]["reason"].startswith("TensorRT's fp16 engine would ship")
    assert rows["fp16/all"]["outcome"] == "won" and "latency_ms_p50" in rows["fp16/all"]
    assert job["engine_report"]["metadata"]["precision"] == "fp16"


def test_a_tensorrt_search_that_also_tries_onnxruntime_ships_the_cpu_engine_when_it_wins(
        embedded: EmbeddedWorker, fake_tensorrt_control: Path) -> None:
    # FakeTensorRT's engines are made slow, so ONNX Runtime's (timed on the same worker) win.
    fake_tensorrt_control.write_text(json.dumps({"infer_delay_s": {"fp16": 0.02, "fp32": 0.02}}))
    model_id = embedded.upload(model_bytes(_convnet(10)), "convnet.onnx")
    job = embedded.wait(embedded.submit(
        model_id, backend="tensorrt", search={
            "backends": ["tensorrt", "onnxruntime"], "precisions": ["fp16", "fp32"],
            "pass_sets": False, "time_budget_s": 120}, **FAST))

    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    rows = {row["name"]: row for row in report["rows"]}
    assert set(rows) == {"tensorrt:fp16/all", "tensorrt:fp32/all", "onnxruntime:fp32/all",
                         "onnxruntime:fp16/all"}
    assert report["winner"].startswith("onnxruntime:"), report
    for name in ("tensorrt:fp16/all", "tensorrt:fp32/all"):
        assert rows[name]["outcome"] == "slower" and "beyond its interval" in rows[name]["reason"]
    assert report["recipe"]["backend"] == "onnxruntime" and "profiles" not in report["recipe"]
    # which backend won, and by how much against the other's best
    assert [b["backend"] for b in report["backends"]] == ["onnxruntime", "tensorrt"]
    assert report["why"].startswith(f"ONNX Runtime {rows[report['winner']]['precision']} won: ")
    assert "faster than the best TensorRT candidate (tensorrt:" in report["why"]
    assert "; ONNX Runtime won, " in job["outcome"]["headline"]
    page = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/report.html").text
    assert 'id="search-backends"' in page and "TensorRT" in page
    manifest = embedded.client.get(f"/v1/jobs/{job['id']}/artifacts/manifest.json").json()
    assert manifest["backend"] == "onnxruntime"
    # the jobs list shows the engine it shipped
    listed = embedded.client.get("/v1/jobs", params={"model_id": model_id}).json()
    assert [item["backend"] for item in listed["items"]] == ["onnxruntime"]


def test_a_throughput_search_races_one_thread_candidates_a_request_per_core_at_once(
        embedded: EmbeddedWorker) -> None:
    cores = len(os.sched_getaffinity(0))
    model_id = embedded.upload(model_bytes(_convnet(11)), "convnet.onnx")
    job = embedded.wait(embedded.submit(model_id, search={"backends": ["onnxruntime"],
        "strategy": "max_throughput", "precisions": ["fp32"], "pass_sets": False,
        "time_budget_s": 60}, **FAST))

    assert job["status"] == "succeeded", job["error"]
    rows = {row["name"]: row for row in job["search_report"]["rows"]}
    # one thread is tried without being asked, serving a request per core at once
    assert set(rows) == {"fp32/all", "fp32/all@1t"}
    assert rows["fp32/all"]["requests"] == 1 and rows["fp32/all@1t"]["requests"] == cores
    for row in rows.values():
        assert row["throughput_per_s"] == pytest.approx(
            row["requests"] / (row["latency_ms_p50"] / 1000), rel=0.01)
    # the table is in the strategy's order: the most served first
    served = [row["throughput_per_s"] for row in job["search_report"]["rows"]]
    assert served == sorted(served, reverse=True)
