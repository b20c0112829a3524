"""The job page shows what the job document holds, from real worker documents (see
job_documents.py): stages, fusion report, ablation, validation with its localisation,
benchmarks, engine layers, events, artifacts, the error; a cancel form only while the job can
be cancelled; and never another project's job."""

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.outcome import job_outcome
from core.settings import Settings
from tests.dashboard.html_tree import Element, parse
from tests.dashboard.job_documents import document, insert_job, insert_model
from tests.support.api_keys import new_key

SECTIONS = ["stages", "fusion", "ablation", "validation", "benchmarks", "profile", "events",
            "artifacts"]


def page(site: TestClient, job_id: str) -> Element:
    response = site.get(f"/ui/jobs/{job_id}")
    assert response.status_code == 200, response.text[:500]
    return parse(response.text)


def section(tree: Element, name: str) -> Element:
    return tree.by_id(name)


def chart_bars(tree: Element, name: str) -> list[Element]:
    return tree.one("svg", class_="chart", data_chart=name).find_all("rect", class_="bar")


def body_rows(table: Element) -> list[Element]:
    return table.one("tbody").find_all("tr")


def test_succeeded_job_shows_every_section_and_its_status(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    job_id = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    tree = page(signed_in_site, job_id)

    assert tree.one("h1").one("span", class_="status").text == "succeeded"
    for name in SECTIONS:
        section(tree, name)
    assert not tree.find_all(id="error") and not tree.find_all(id="engine-layers")
    assert not tree.find_all(id="cancel-job")
    assert "cnn.onnx" in tree.one("dl", class_="job-facts").text
    run_again = tree.by_id("run-again")
    assert run_again.attrs["href"] == f"/ui/models/{model_id}/new-job?from_job={job_id}"


def test_op_histogram_has_a_bar_per_op_type_per_series_and_the_same_numbers_in_a_table(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    report = document("onnxruntime_ablation")["fusion_report"]
    ops = set(report["ops_before"]) | set(report["ops_after"])
    tree = section(page(signed_in_site, insert_job(db_session, project, model_id,
                                                   "onnxruntime_ablation")), "fusion")

    found = chart_bars(tree, "op-histogram")
    assert len(found) == 2 * len(ops)
    drawn = {(b.attrs["data-series"], b.attrs["data-label"]): float(b.attrs["data-value"])
             for b in found}
    assert drawn[("before", "BatchNormalization")] == 2 and drawn[("after", "BatchNormalization")] == 0
    assert drawn[("after", "com.microsoft.FusedConv")] == 2
    table = {row.one("th").text: [td.text for td in row.find_all("td")]
             for row in body_rows(tree.one("table", class_="op-table"))}
    assert table["com.microsoft.FusedConv"] == ["0", "2"]
    applied = [[td.text for td in row.find_all("td")]
               for row in body_rows(tree.one("table", id="rules-applied"))]
    assert ["fold_batch_norm", "FoldBatchNormIntoConv", "2"] in applied
    assert all(int(count) > 0 for _, _, count in applied)  # rules that never fired stay out


def test_near_misses_name_the_node_and_the_reason_the_check_gave(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    job_id = insert_job(db_session, project, model_id, "onnxruntime_ablation",
                        fusion_report=document("near_miss_fusion_report"))
    fusion = section(page(signed_in_site, job_id), "fusion")

    [row] = body_rows(fusion.one("table", id="near-misses"))
    assert "FoldBatchNormIntoConv" in row.text and "bn" in row.text
    assert "'w' is also used by node 'other_conv'" in row.text
    assert "No rewrite rule applied" in fusion.text


def test_ablation_has_one_bar_per_stage_and_flags_a_slower_stage(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    stages = [b for b in document("onnxruntime_ablation")["benchmarks"] if b["suite"] == "ablation"]
    tree = section(page(signed_in_site, insert_job(db_session, project, model_id,
                                                   "onnxruntime_ablation")), "ablation")

    found = chart_bars(tree, "ablation")
    assert [(b.attrs["data-label"], float(b.attrs["data-value"])) for b in found] == [
        (s["variant"], s["latency_ms_p50"]) for s in stages]
    rows = {row.one("th").text: row.text for row in body_rows(tree.one("table", id="ablation-table"))}
    assert list(rows) == ["none", "conv_bn_act", "add_relu", "matmul_gemm", "all"]
    assert "slower than the stage before" in rows["add_relu"]
    assert "slower" not in rows["conv_bn_act"]


def test_job_without_ablation_says_it_did_not_ask_for_one(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = section(page(signed_in_site, insert_job(db_session, project, model_id, "fp16_search")),
                   "ablation")
    assert not tree.find_all("svg")
    assert "did not ask for one" in tree.one("p", class_="empty").text


def test_benchmarks_chart_original_and_engine_percentiles_with_throughput_and_speedup(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = section(page(signed_in_site, insert_job(db_session, project, model_id,
                                                   "onnxruntime_ablation")), "benchmarks")

    found = chart_bars(tree, "latency")
    assert len(found) == 2 * 4  # original and engine × p50, p90, p99, mean
    assert {b.attrs["data-series"] for b in found} == {"original", "engine"}
    engine_p50 = next(b for b in found if b.attrs["data-series"] == "engine"
                      and b.attrs["data-label"] == "p50")
    assert float(engine_p50.attrs["data-value"]) == pytest.approx(0.134609)
    rows = {row.attrs["data-variant"]: row.text
            for row in body_rows(tree.one("table", id="benchmark-table"))}
    assert "0.135" in rows["engine"] and "14,309" in rows["engine"] and "1.36×" in rows["engine"]
    assert "1.36×" in tree.one("p", class_="headline").text


def test_latency_chart_groups_percentiles_per_batch_size_when_several_were_timed(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("fp16_search")
    doc["benchmarks"] += [{**b, "batch_size": 8} for b in doc["benchmarks"]]
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    found = chart_bars(tree, "latency")
    assert len(found) == 2 * 4 * 2
    assert {b.attrs["data-label"] for b in found} >= {"p50 (batch 1)", "p99 (batch 8)"}


def test_failed_job_shows_its_error_and_where_the_outputs_diverge(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("failed_localised")
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    error = section(tree, "error")
    assert error.one(class_="error-code").text == "AccuracyMismatchError"
    assert "differ from the original model's beyond tolerance" in error.text
    localisation = section(tree, "localisation")
    assert "node_FusedConv_3" in localisation.text
    assert "conv1, bn1, relu1" in localisation.text
    assert "rule(s) FoldBatchNormIntoConv break equivalence" in localisation.text
    validation = section(tree, "validation")
    [output] = body_rows(validation.one("table", id="validation-outputs"))
    assert output.attrs["data-output"] == "logits" and "failed" in output.text
    assert "Not benchmarked: the job failed" in section(tree, "benchmarks").text
    assert "only when it succeeds" in section(tree, "artifacts").text
    assert not tree.find_all(id="cancel-job")


def test_fallback_job_says_what_it_kept_and_keeps_the_localisation(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("fallback")
    rounds = sum(e["message"].startswith("stage optimize started") for e in doc["events"])
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    assert not tree.find_all(id="error")
    assert "the unfused model with ONNX Runtime's optimizations off" in section(tree, "fallback").text
    assert "node_FusedConv_3" in section(tree, "localisation").text
    # The job's own round of optimize, build and validate, then one per fallback attempt: each
    # on the timeline, counted once in the totals.
    stages = section(tree, "stages")
    assert rounds == 4
    assert [b.attrs["data-label"] for b in chart_bars(stages, "stages")].count("optimize") == 4
    totals = [row.one("th").text for row in body_rows(stages.one("table", class_="stage-totals"))]
    assert totals.count("optimize") == 1


def test_the_stage_totals_show_each_stages_peak_memory_where_the_job_measured_it(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("onnxruntime_ablation")
    stages = list(dict.fromkeys(e["stage"] for e in doc["events"]
                                if e["message"].startswith(f"stage {e['stage']} started")))
    peaks = {stage: 300.0 + 10 * index for index, stage in enumerate(stages[:-1])}
    doc["stage_memory"] = {"peak_rss_mb": peaks, "method": "VmHWM"}

    measured = section(page(signed_in_site, insert_job(db_session, project, model_id, doc)),
                       "stages").one("table", class_="stage-totals")
    unmeasured = section(page(signed_in_site, insert_job(
        db_session, project, model_id, "onnxruntime_ablation")), "stages").one(
        "table", class_="stage-totals")

    cells = {row.one("th").text: row.find_all("td")[-1].text for row in body_rows(measured)}
    assert cells[stages[0]] == "300 MiB" and cells[stages[1]] == "310 MiB"
    assert cells[stages[-1]] == "\u2014"  # a stage without a figure says so
    assert "Peak memory" in measured.text and "Peak memory" not in unmeasured.text


def test_precision_search_lists_the_nodes_kept_in_float32(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    search = section(page(signed_in_site, insert_job(db_session, project, model_id,
                                                     "fp16_search")), "precision-search")
    assert "fp16 meets the budget" in search.text
    kept = [row.find_all("td")[0].text for row in body_rows(search.one("table", class_="kept-nodes"))]
    assert kept == ["node_FusedConv_3", "node_FusedConv_2"]


def test_tensorrt_job_lists_the_engine_layers_and_the_onnx_nodes_each_fused(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = page(signed_in_site, insert_job(db_session, project, model_id, "tensorrt_ablation"))

    engine = section(tree, "engine-layers")
    assert "10.16.1.11+fake" in engine.text and "7 layers" in engine.text
    [fused] = body_rows(engine.one("table", id="engine-fusions"))
    assert "Conv + Relu" in fused.text
    assert [c.text for c in fused.find_all("td")[3].find_all("code")] == ["node_Conv_0", "relu1"]
    assert len(chart_bars(tree, "ablation")) == 5
    assert "Build log" in section(tree, "events").one("details", id="build-log").text


def test_artifacts_link_to_the_api_download_with_name_and_size(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    job_id = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    listed = signed_in_site.get(f"/v1/jobs/{job_id}").json()["artifacts"]
    tree = section(page(signed_in_site, job_id), "artifacts")

    links = tree.find_all("a", class_="artifact-download")
    assert [(a.text, a.attrs["href"]) for a in links] == [(a["name"], a["url"]) for a in listed]
    assert all(a.attrs["href"].startswith(f"/v1/jobs/{job_id}/artifacts/") for a in links)
    engine_row = next(r for r in body_rows(tree.one("table")) if r.attrs["data-artifact"] == "engine.onnx")
    assert "4.5 KB" in engine_row.text


def test_an_expired_artifact_is_listed_without_a_link(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("onnxruntime_ablation")
    doc["artifacts"][0]["expired_at"] = "2026-12-01T00:00:00+00:00"
    tree = section(page(signed_in_site, insert_job(db_session, project, model_id, doc)), "artifacts")

    assert doc["artifacts"][0]["name"] not in [a.text for a in tree.find_all("a", class_="artifact-download")]
    assert "retention policy" in tree.text


def _running(doc_name: str = "onnxruntime_ablation", status: str = "running") -> dict:  # type: ignore[type-arg]
    """A copy of a finished document as the job was mid-validation (or still queued)."""
    doc = document(doc_name)
    now = datetime.now(UTC)
    doc.update(status=status, finished_at=None, error=None, artifacts=[], benchmarks=[],
               validation=None, engine_report=None, created_at=(now - timedelta(seconds=30)).isoformat())
    if status == "queued":
        doc.update(stage=None, progress=0.0, started_at=None, fusion_report=None,
                   accuracy_report=None, events=doc["events"][:1],
                   status_detail="waiting for a worker: no online worker consumes queue 'cpu'")
    else:
        doc.update(stage="validate", progress=0.6, started_at=(now - timedelta(seconds=20)).isoformat())
        doc["events"] = [{**e, "created_at": (now - timedelta(seconds=20 - i)).isoformat()}
                         for i, e in enumerate(doc["events"][:6])]
    doc["events"][0]["created_at"] = doc["created_at"]
    return doc


@pytest.mark.parametrize("status", ["queued", "running"])
def test_a_job_that_can_be_cancelled_has_the_cancel_form_with_the_page_token(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID, status: str) -> None:
    job_id = insert_job(db_session, project, model_id, _running(status=status))
    response = signed_in_site.get(f"/ui/jobs/{job_id}")
    tree = parse(response.text)

    form = tree.one("form", id="cancel-job")
    assert form.attrs["method"] == "post" and form.attrs["action"] == f"/ui/jobs/{job_id}/cancel"
    token = form.one("input", name="csrf_token").attrs["value"]
    assert re.search(r'<meta name="csrf-token" content="([0-9a-f]+)"', response.text).group(1) == token  # type: ignore[union-attr]
    assert form.one("button").text == "Cancel job"
    assert tree.one("div", id="job").attrs["data-live"] == "true"
    assert tree.one("progress", id="job-progress").attrs["value"] == str(float(
        0.6 if status == "running" else 0.0))


@pytest.mark.parametrize("doc", ["onnxruntime_ablation", "failed_localised"])
def test_a_finished_job_has_no_cancel_form_and_does_not_follow_events(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID, doc: str) -> None:
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))
    assert not tree.find_all(id="cancel-job")
    assert tree.one("div", id="job").attrs["data-live"] == "false"
    assert not tree.find_all(id="job-progress")


def test_a_cancelled_job_says_so(signed_in_site: TestClient, db_session: Session,
                                 project: uuid.UUID, model_id: uuid.UUID) -> None:
    doc = _running()
    doc.update(status="cancelled", finished_at=datetime.now(UTC).isoformat())
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    assert tree.one("h1").one("span", class_="status").text == "cancelled"
    assert not tree.find_all(id="cancel-job") and "was cancelled" in tree.by_id("cancelled-note").text


def test_a_running_job_shows_its_current_stage_in_progress_and_empty_sections_say_so(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = page(signed_in_site, insert_job(db_session, project, model_id, _running()))

    assert tree.one("span", id="job-stage").text == "validate"
    [*_, last] = chart_bars(section(tree, "stages"), "stages")
    assert last.attrs["data-label"] == "validate" and "in progress" in last.text
    assert "Not benchmarked yet" in section(tree, "benchmarks").text
    assert "Not validated yet" in section(tree, "validation").text
    assert "Not measured yet" in section(tree, "ablation").text
    assert section(tree, "artifacts").one("p", class_="empty")


def test_a_queued_job_says_why_it_waits_and_that_no_stage_started(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    tree = page(signed_in_site, insert_job(db_session, project, model_id, _running(status="queued")))

    assert "no online worker consumes queue 'cpu'" in tree.by_id("status-detail").text
    assert "No stage has started yet" in section(tree, "stages").text
    assert "No fusion report yet" in section(tree, "fusion").text


def test_names_from_uploaded_files_are_escaped_everywhere(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    hostile = '<script>alert("x")</script>'
    model_id = insert_model(db_session, project, name=f"{hostile}.onnx")
    doc = document("onnxruntime_ablation")
    doc["fusion_report"]["ops_before"][hostile] = 3
    doc["events"].append({"stage": "store", "message": hostile, "created_at": doc["finished_at"]})
    doc["validation"]["outputs"][0]["name"] = hostile
    response = signed_in_site.get(f"/ui/jobs/{insert_job(db_session, project, model_id, doc)}")

    tree = parse(response.text)
    assert [s.attrs.get("src") for s in tree.find_all("script")] == [
        "/ui/static/dashboard.js", "/ui/static/job_detail.js"]
    assert hostile in tree.one("dl", class_="job-facts").text
    assert any(b.attrs["data-label"] == hostile for b in chart_bars(tree, "op-histogram"))
    assert hostile in section(tree, "events").text


def test_another_projects_job_is_not_found(
        signed_in_site: TestClient, db_session: Session, settings: Settings) -> None:
    other_project, _ = new_key(db_session, settings)
    other_job = insert_job(db_session, other_project, insert_model(db_session, other_project),
                           "failed_localised")
    response = signed_in_site.get(f"/ui/jobs/{other_job}")

    assert response.status_code == 404
    assert "JobNotFound" in response.text
    assert "node_FusedConv_3" not in response.text


def test_the_page_script_is_served(signed_in_site: TestClient) -> None:
    script = signed_in_site.get("/ui/static/job_detail.js")
    assert script.status_code == 200
    assert "/events" in script.text and "FuseForge.stream" in script.text


def test_benchmarks_show_interval_verdict_regression_sweep_and_environment(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("onnxruntime_ablation")
    comparison = [b for b in doc["benchmarks"] if b["suite"] == "comparison"]
    engine = next(b for b in comparison if b["variant"] == "engine")
    environment = {"cpu": "Test CPU 9000", "cpu_cores": 2, "worker": "vm:1", "onnxruntime": "1.23.2"}
    engine.update(speedup_vs_reference=1.01, speedup_ci_low=0.97, speedup_ci_high=1.04,
                  speedup_verdict="no measurable difference", environment=environment,
                  environment_key="0123456789abcdef", warmup_cv=0.02, warmup_stable=True,
                  latency_ms_p50_ci_low=0.05, latency_ms_p50_ci_high=0.06,
                  bytes_per_inference=4_825_088, achieved_gb_s=3.2, bandwidth_fraction=0.27,
                  regression={"against_job": str(uuid.uuid4()), "detail": "engine p50 3.10 ms "
                              "(2.98–3.22) vs 2.40 ms (2.35–2.46): 1.29× slower"})
    sizes = (1, 2, 4)
    doc["benchmarks"] += [{**b, "suite": "sweep", "batch_size": n,
                           "latency_ms_p50": b["latency_ms_p50"] * n, "regression": None}
                          for n in sizes for b in comparison if b["variant"] in ("original", "engine")]
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    headline = tree.by_id("headline-speedup").text
    assert "No measurable difference" in headline and "0.97×–1.04×" in headline
    assert "1.29× slower" in tree.by_id("regression").text
    assert "Test CPU 9000" in tree.by_id("environment").text
    assert "27.0%" in tree.by_id("benchmark-context").text
    for name in ("sweep-latency", "sweep-throughput"):
        chart = tree.one("svg", class_="chart", data_chart=name)
        assert len(chart.find_all("circle", class_="point")) == 2 * len(sizes)
    assert len(body_rows(tree.by_id("sweep-table"))) == 2 * len(sizes)


@pytest.fixture(scope="module")
def int8_report(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    """A real int8 step's report (optimizer/quantization on a convnet built in code), as the
    worker stores it under accuracy_report.quantization."""
    import onnx

    from optimizer.optimize import OptimizeOptions, optimize_model
    from optimizer.precision import run_outputs
    from optimizer.quantization.calibration import calibrate
    from optimizer.quantization.node_precision import engine_node_precisions
    from optimizer.quantization.search import QuantizationRequest, quantize_within_budget
    from optimizer.registries.quantization import CalibrationMethod
    from optimizer.testing.quantization_models import calibration_images, outlier_channel
    from optimizer.validation.tolerances import default_tolerances

    model = outlier_channel(seed=5)  # int8 meets the budget only with nodes kept in float
    feeds = [{"input": x} for x in calibration_images(model, 6, seed=1)]
    fused, _ = optimize_model(model, OptimizeOptions(for_quantization=True))
    result = quantize_within_budget(
        # Untimed: timed, this small model's int8 would stop before keeping any node.
        fused, request=QuantizationRequest(method=CalibrationMethod.MINMAX,
                                           time_candidates=False),
        tolerances=default_tolerances("int8").with_overrides({"min_cosine": 0.999}),
        validation_feeds=feeds[4:], reference=run_outputs(model, feeds[4:]),
        calibration_feeds=feeds[:4], tables=lambda method, g: calibrate(g, feeds[:4], method))
    report = result.to_dict()
    path = tmp_path_factory.mktemp("int8") / "int8.onnx"
    onnx.save(result.model or fused, path)
    report["node_precisions"] = engine_node_precisions(fused, path, level="all",
                                                       kept=result.kept_reasons).to_dict()
    return report


def test_an_int8_job_shows_what_shipped_its_candidates_kept_nodes_and_nodes_by_precision(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID, int8_report: dict) -> None:  # type: ignore[type-arg]
    doc = document("onnxruntime_ablation")
    doc["config"] = {**doc["config"], "precision": "int8"}
    doc["accuracy_report"] = {**doc["accuracy_report"], "quantization": int8_report}

    panel = section(page(signed_in_site, insert_job(db_session, project, model_id, doc)),
                    "quantization")

    assert f"{int8_report['shipped']} shipped" in panel.one("h3").text
    assert panel.by_id("quantization-why").text == int8_report["why"]
    candidates = body_rows(panel.one("table", class_="int8-candidates"))
    assert [row.find_all("td")[0].text for row in candidates] == [
        c["label"] for c in int8_report["tried"]]
    kept = [row.find_all("td")[0].text for row in body_rows(panel.one("table", class_="kept-nodes"))]
    assert kept == [n["name"] for n in int8_report["kept_nodes"]] and kept
    counts = int8_report["node_precisions"]["node_counts"]
    assert len(chart_bars(panel, "int8-nodes")) == len(counts)


@pytest.fixture(scope="module")
def profile_report(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    """A real profile report: ONNX Runtime's profiler on a small CNN and on its fused model,
    mapped back through the origin tags and the session graphs, as the worker builds it."""
    import numpy as np
    import onnx

    from optimizer.measure.hot_spots import ProfileInputs
    from optimizer.measure.hot_spots import profile_report as build_report
    from optimizer.measure.node_profile import profile_onnxruntime
    from optimizer.measure.provenance import compose, node_ids, node_provenance
    from optimizer.optimize import OptimizeOptions, optimize_model
    from optimizer.testing.models import small_cnn

    folder = tmp_path_factory.mktemp("profile")
    model = small_cnn(seed=7, batch=2)
    fused, _ = optimize_model(model, OptimizeOptions())
    onnx.save(model, folder / "original.onnx")
    onnx.save(fused, folder / "fused.onnx")
    feed = {"input": np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)}
    original = profile_onnxruntime(folder / "original.onnx", feed, runs=3)
    engine = profile_onnxruntime(folder / "fused.onnx", feed, runs=3)
    assert original.session_graph is not None and engine.session_graph is not None
    return {"profiler": "ONNX Runtime's profiler, 3 runs", "input_shapes": {"input": [2, 3, 32, 32]},
            **build_report(ProfileInputs(
                original=original.profile, engine=engine.profile,
                original_op_types={i: n.op_type for i, n in zip(node_ids(model.graph),
                                                                model.graph.node, strict=True)},
                original_provenance=node_provenance(model.graph, original.session_graph),
                engine_provenance=compose(node_provenance(model.graph, fused.graph),
                                          node_provenance(fused.graph, engine.session_graph)),
                refusals={"pool": "SomeRule: a refusal the fusion report holds"},
                float_reasons={}, bandwidth_gb_s=10.0))}


def test_the_profile_charts_time_by_op_type_and_lists_the_top_nodes_with_their_origin(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID, profile_report: dict) -> None:  # type: ignore[type-arg]
    doc = document("onnxruntime_ablation")
    doc["profile_report"] = profile_report

    panel = section(page(signed_in_site, insert_job(db_session, project, model_id, doc)),
                    "profile")

    assert panel.by_id("hot-spot").text.startswith(
        f"Biggest hot spot: {profile_report['top_nodes'][0]['node']}")
    op_types = [row["op_type"] for row in profile_report["by_op_type"]]
    assert len(chart_bars(panel, "profile-op-types")) == 2 * len(op_types)
    assert [row.one("th").text for row in body_rows(panel.by_id("profile-op-types-table"))] == op_types
    top = body_rows(panel.by_id("profile-top-nodes"))
    assert [row.find_all("td")[0].text for row in top] == [
        n["node"] for n in profile_report["top_nodes"]]
    for row, node in zip(top, profile_report["top_nodes"], strict=True):
        assert all(origin in row.find_all("td")[-1].text for origin in node["from"])
    assert any("conv1" in node["from"] for node in profile_report["top_nodes"])
    unfused = {row.find_all("td")[0].text: row.find_all("td")[-1].text
               for row in body_rows(panel.by_id("profile-unfused"))}
    assert unfused["pool"] == "SomeRule: a refusal the fusion report holds"


def test_a_job_whose_backend_cannot_profile_says_why(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("tensorrt_ablation")
    doc["profile_report"] = {"skipped": "per-layer profiles of TensorRT engines are not taken yet"}

    panel = section(page(signed_in_site, insert_job(db_session, project, model_id, doc)),
                    "profile")

    assert panel.one("p", class_="empty").text == (
        "No profile: per-layer profiles of TensorRT engines are not taken yet.")


def _with_outcome(doc: dict, **recorded: object) -> dict:  # type: ignore[type-arg]
    """`doc` with the outcome the worker records from its reports, benchmarks and verdict."""
    engine = next(b for b in doc["benchmarks"]
                  if b["suite"] == "comparison" and b["variant"] == "engine")
    validation = {"passed": doc["validation"]["passed"], "outputs": doc["validation"]["outputs"],
                  "tolerances": (doc["accuracy_report"] or {}).get("tolerances") or {}}
    doc["outcome"] = job_outcome(config=doc["config"], status=doc["status"], reports=doc,
                                 engine_record=engine, validation=validation,
                                 **recorded).model_dump(mode="json")  # type: ignore[arg-type]
    return doc


def test_the_first_screen_is_the_outcome_card_and_the_long_sections_fold_below_it(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("onnxruntime_ablation")
    doc["config"] = {**doc["config"], "precision": "int8", "quantization": {"mode": "dynamic"}}
    why = "int8 (dynamic) ran at 1.020x [0.990, 1.050] the fp32 model's time: not faster"
    doc["accuracy_report"] = {**doc["accuracy_report"],
                              "quantization": {"shipped": "fp32", "why": why}}
    for record in doc["benchmarks"]:  # an interval reaching 1.0: no measurable difference
        if record["suite"] == "comparison" and record["variant"] == "engine":
            record.update(speedup_vs_reference=1.04, speedup_ci_low=0.92, speedup_ci_high=1.09,
                          speedup_verdict="no measurable difference")
    doc = _with_outcome(doc)
    html = signed_in_site.get(f"/ui/jobs/{insert_job(db_session, project, model_id, doc)}").text
    tree = parse(html)

    card = tree.by_id("outcome")
    outcome = doc["outcome"]
    # The headline, in the API's words, then asked against shipped and why.
    assert card.by_id("outcome-headline").text == outcome["headline"]
    assert outcome["headline"].startswith("Shipped the onnxruntime fp32 engine (int8 asked): ")
    assert card.by_id("outcome-asked").text.startswith("onnxruntime int8 (dynamic quantization)")
    assert card.by_id("outcome-shipped").text.startswith("the onnxruntime fp32 engine")
    assert card.by_id("outcome-why").text == f"int8 was asked; fp32 shipped: {why}."
    # The speed-up with its interval and verdict; the accuracy verdict with its worst metric.
    assert card.by_id("outcome-speedup").text == (
        "no measurable difference: 1.04× the original's speed (95% interval 0.92×–1.09×)")
    assert "x faster" not in card.text and "× faster" not in card.text
    accuracy = card.by_id("outcome-accuracy").text
    assert accuracy.startswith("passed") and outcome["accuracy"]["worst"]["text"] in accuracy
    download = card.by_id("download-engine")
    assert download.attrs["href"] == next(
        f"/v1/jobs/{doc_id}/artifacts/engine.onnx" for doc_id in [tree.by_id("job").attrs[
            "data-job-id"]])
    # The card comes first; the long sections fold below it, closed.
    assert html.index('id="outcome"') < html.index('id="stages"') < html.index('id="fusion"')
    for name in ("stages", "fusion", "ablation", "validation", "benchmarks", "profile",
                 "events"):
        fold = section(tree, name).one("details", class_="fold")
        assert "open" not in fold.attrs, name
    assert "Backend" not in tree.one("dl", class_="job-facts").text  # the card says it


def test_a_job_that_shipped_its_original_says_so_first(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = _with_outcome(document("fallback"), original_shipped=(
        "no engine that validated was faster than the original"))
    tree = page(signed_in_site, insert_job(db_session, project, model_id, doc))

    card = tree.by_id("outcome")
    assert card.by_id("outcome-headline").text.startswith("Shipped your original model unchanged")
    assert card.by_id("outcome-shipped").text == "your original model, unchanged"
    assert not card.find_all(id="outcome-speedup")


def test_a_failed_jobs_validation_is_open_and_a_running_jobs_card_says_what_it_asked(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    failed = page(signed_in_site, insert_job(db_session, project, model_id, "failed_localised"))
    assert "open" in section(failed, "validation").one("details", class_="fold").attrs
    running = page(signed_in_site, insert_job(db_session, project, model_id, _running()))
    assert running.by_id("outcome-headline").text.startswith("Asked: onnxruntime fp32.")
    assert "open" in section(running, "events").one("details", class_="fold").attrs
    assert not running.find_all(id="download-engine")
