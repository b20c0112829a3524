"""Compare: jobs of one model in one table (a column each, the best value of a row saying
"best"), a latency chart; jobs of different models refused; a picker from models to jobs; and
no job of another project."""

import uuid

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.settings import Settings
from tests.dashboard.html_tree import Element, parse
from tests.dashboard.job_documents import document, insert_job, insert_model
from tests.support.api_keys import new_key


def compare(site: TestClient, *job_ids: str, status: int = 200) -> Element:
    response = site.get("/ui/compare", params=[("job", job_id) for job_id in job_ids])
    assert response.status_code == status, response.text[:500]
    return parse(response.text)


def rows(table: Element) -> dict[str, list[Element]]:
    return {row.one("th").text: row.find_all("td") for row in table.one("tbody").find_all("tr")}


def test_comparison_has_a_column_per_job_and_marks_the_best_with_text(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    fp32 = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    fp16 = insert_job(db_session, project, model_id, "fp16_search")
    tree = compare(signed_in_site, fp32, fp16)

    table = tree.one("table", id="comparison")
    assert [th.attrs["data-job-id"] for th in table.one("thead").find_all("th")[1:]] == [fp32, fp16]
    by_row = rows(table)
    assert [c.text for c in by_row["Backend"]] == ["onnxruntime", "onnxruntime"]
    assert [c.text for c in by_row["Precision"]] == ["fp32", "fp16"]
    # fp16's engine: p50 0.0573 ms against 0.135 ms, 16,497/s against 14,309/s.
    p50 = by_row["Engine latency p50 (lower is better)"]
    assert [c.text for c in p50] == ["0.135 ms", "0.0573 ms best"]
    assert [("best" in c.classes) for c in p50] == [False, True]
    assert by_row["Throughput (higher is better)"][1].text.endswith("best")
    assert by_row["Speed-up vs original (higher is better)"][1].text == "1.39× best"
    assert [c.text for c in by_row["Validation"]] == ["passed", "passed"]
    assert [c.text for c in by_row["Fused ops"]] == ["com.microsoft.FusedConv × 2"] * 2
    assert "Device memory (lower is better)" not in by_row  # no job recorded any


def test_the_latency_chart_has_three_percentiles_per_job(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    jobs = [insert_job(db_session, project, model_id, name)
            for name in ("onnxruntime_ablation", "fp16_search", "fallback")]
    chart = compare(signed_in_site, *jobs).one("svg", class_="chart", data_chart="compare-latency")

    bars = chart.find_all("rect", class_="bar")
    assert len(bars) == 3 * 3
    assert {b.attrs["data-series"] for b in bars} == {"p50", "p90", "p99"}
    assert {b.attrs["data-label"][:8] for b in bars} == {job[:8] for job in jobs}


def test_a_failed_job_compares_with_dashes_where_it_has_no_timing(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    ok = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    failed = insert_job(db_session, project, model_id, "failed_localised")
    by_row = rows(compare(signed_in_site, ok, failed).one("table", id="comparison"))

    assert [c.text for c in by_row["Engine latency p50 (lower is better)"]] == ["0.135 ms", "–"]
    assert by_row["Validation"][1].text == "failed (logits)"
    assert [c.text for c in by_row["Status"]] == ["succeeded", "failed"]


def test_jobs_of_different_models_are_refused_naming_the_models(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    other_model = insert_model(db_session, project, name="bert.onnx")
    first = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    second = insert_job(db_session, project, other_model, "fp16_search")
    tree = compare(signed_in_site, first, second, status=422)

    refusal = tree.one("div", id="compare-refused").text
    assert "different models" in refusal and "cnn.onnx" in refusal and "bert.onnx" in refusal
    assert not tree.find_all(id="comparison")
    assert {a.attrs["href"] for a in tree.one("main").find_all("a")} >= {
        f"/ui/compare?model={model_id}", f"/ui/compare?model={other_model}"}


def test_a_job_id_that_is_not_one_is_refused(signed_in_site: TestClient) -> None:
    tree = compare(signed_in_site, "../../v1/project", status=422)
    assert "is not a job id" in tree.one("div", id="compare-refused").text


def test_more_jobs_than_a_table_can_hold_are_refused_with_a_page(signed_in_site: TestClient) -> None:
    tree = compare(signed_in_site, *(str(uuid.uuid4()) for _ in range(21)), status=422)
    assert "compare at most 20" in tree.one("div", id="compare-refused").text


def test_another_projects_job_is_not_found(
        signed_in_site: TestClient, db_session: Session, settings: Settings, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    mine = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    other_project, _ = new_key(db_session, settings)
    theirs = insert_job(db_session, other_project, insert_model(db_session, other_project),
                        "fp16_search")
    response = signed_in_site.get("/ui/compare", params=[("job", mine), ("job", theirs)])

    assert response.status_code == 404
    assert "JobNotFound" in response.text and "comparison" not in response.text


def test_a_job_named_twice_is_one_column(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    job = insert_job(db_session, project, model_id, "onnxruntime_ablation")
    tree = compare(signed_in_site, job, job)

    assert len(tree.one("table", id="comparison").one("thead").find_all("th")) == 2
    assert "Pick at least two jobs" in tree.one("main").text


def test_picker_lists_the_models_then_one_models_jobs_to_tick(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    other_model = insert_model(db_session, project, name="bert.onnx")
    jobs = [insert_job(db_session, project, model_id, name)
            for name in ("onnxruntime_ablation", "failed_localised")]
    insert_job(db_session, project, other_model, "fp16_search")

    models = parse(signed_in_site.get("/ui/compare").text).one("table", id="compare-models")
    assert {a.attrs["href"] for a in models.find_all("a")} == {
        f"/ui/compare?model={model_id}", f"/ui/compare?model={other_model}"}

    picker = parse(signed_in_site.get(f"/ui/compare?model={model_id}").text)
    form = picker.one("form", id="compare-pick")
    assert form.attrs["method"] == "get" and form.attrs["action"] == "/ui/compare"
    boxes = form.find_all("input", name="job")
    assert sorted(box.attrs["value"] for box in boxes) == sorted(jobs)
    for box in boxes:  # every box has its label
        assert form.one("label", **{"for": box.attrs["id"]})
    assert form.one("button").attrs["type"] == "submit"


def test_picker_says_so_when_there_is_nothing_to_pick(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    assert "No models yet" not in signed_in_site.get("/ui/compare").text
    picker = parse(signed_in_site.get(f"/ui/compare?model={model_id}").text)
    assert "no jobs yet" in picker.one("p", class_="empty").text


def test_no_models_says_so(signed_in_site: TestClient) -> None:
    tree = parse(signed_in_site.get("/ui/compare").text)
    assert "No models yet" in tree.one("p", class_="empty").text


def test_best_is_marked_on_ties_but_not_when_every_job_is_equal(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        model_id: uuid.UUID) -> None:
    doc = document("onnxruntime_ablation")
    slower = document("onnxruntime_ablation")
    for bench in slower["benchmarks"]:
        bench["latency_ms_p50"] *= 2
    jobs = [insert_job(db_session, project, model_id, d)
            for d in (doc, document("onnxruntime_ablation"), slower)]
    by_row = rows(compare(signed_in_site, *jobs).one("table", id="comparison"))

    assert [c.text.endswith("best") for c in by_row["Engine latency p50 (lower is better)"]] == [
        True, True, False]
    assert not any("best" in c.text for c in by_row["Engine latency p99 (lower is better)"])
