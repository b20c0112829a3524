"""The models pages: each uploaded model of the project with its name, opset, size, I/O
signature and jobs; paging; the upload drop zone; one model's signature tables and jobs; and
nothing of another project's."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.models import Model
from core.settings import Settings
from dashboard.pages.models import PAGE_SIZE
from optimizer.testing.models import model_bytes, small_cnn
from tests.dashboard.html_tree import Element, parse
from tests.dashboard.job_documents import document, insert_job, insert_model
from tests.dashboard.uploads import browser_headers, start_job, token_model, upload_model
from tests.support.api_keys import bearer, new_key


@pytest.fixture
def headers(settings: Settings, api_key: tuple[uuid.UUID, str]) -> dict[str, str]:
    return browser_headers(settings, api_key[1])


def _row(page: Element, model_id: str) -> Element:
    return page.by_id("models").one("tr", data_model_id=model_id)


def test_table_shows_each_models_name_opset_size_and_signature(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    data = token_model(opset=13).SerializeToString()
    tokens = upload_model(signed_in_site, headers, data, filename="t.onnx", name="token scorer")
    cnn = upload_model(signed_in_site, headers, small_cnn(), filename="cnn.onnx")

    page = parse(signed_in_site.get("/ui/models").text)

    row = _row(page, tokens["id"])
    assert row.one("th", class_="model-name").one("a").attrs["href"] == f"/ui/models/{tokens['id']}"
    assert "token scorer" in row.one("th", class_="model-name").text
    assert row.one("td", class_="opset").text == "13"
    assert row.one("td", class_="size").attrs["title"] == f"{len(data)} bytes"
    assert row.one("td", class_="size").text == f"{len(data)} B"
    inputs = [li.text for li in row.one("td", class_="inputs").find_all("li")]
    assert inputs == ["input_ids int64 [batch, seq]", "mask float32 [batch, ?]",
                      "position int64 [1, 4]"]
    outputs = [li.text for li in row.one("td", class_="outputs").find_all("li")]
    assert outputs == ["scores float32 [batch, seq]", "position_out int64 [1, 4]"]
    assert row.one("td", class_="created").text.endswith("UTC")
    assert [li.text for li in _row(page, cnn["id"]).one("td", class_="inputs").find_all("li")] == [
        "input float32 [N, 3, 32, 32]"]
    assert _row(page, cnn["id"]).one("td", class_="opset").text == str(cnn["opset"])


def test_jobs_column_counts_each_models_jobs_and_links_to_them(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    cnn = upload_model(signed_in_site, headers, small_cnn())
    idle = upload_model(signed_in_site, headers, token_model())
    for _ in range(2):
        start_job(signed_in_site, headers, cnn["id"])

    page = parse(signed_in_site.get("/ui/models").text)

    busy_link = _row(page, cnn["id"]).one("td", class_="jobs").find_all("a")[0]
    assert busy_link.text == "2 jobs"
    assert busy_link.attrs["href"] == f"/ui/jobs?model_id={cnn['id']}"
    assert _row(page, idle["id"]).one("td", class_="jobs").find_all("a")[0].text == "0 jobs"
    assert _row(page, idle["id"]).one("a", href=f"/ui/models/{idle['id']}/new-job").text == "New job"


def test_no_models_shows_the_empty_state_and_the_upload_zone(signed_in_site: TestClient) -> None:
    page = parse(signed_in_site.get("/ui/models").text)

    assert "No models yet" in page.one("p", class_="empty").text
    assert not page.find_all("table", id="models")
    zone = page.by_id("upload-dropzone")
    file_input = zone.one("input", id="upload-file")
    assert file_input.attrs["type"] == "file" and ".onnx" in file_input.attrs["accept"]
    assert zone.one("label", **{"for": "upload-file"}).text == "Model file"
    assert "max" in zone.one("progress", id="upload-progress").attrs
    assert zone.one(id="upload-status").attrs["aria-live"] == "polite"
    assert page.one("script", src="/ui/static/upload.js")
    assert signed_in_site.get("/ui/static/upload.js").status_code == 200


def _names(page: Element) -> list[str]:
    return [row.one("th").one("a").text
            for row in page.by_id("models").find_all("tr", data_model_id=True)]


def test_models_are_paged_newest_first(
        signed_in_site: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str]) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(PAGE_SIZE + 3):
        db_session.add(Model(project_id=api_key[0], name=f"m{i:03d}", sha256=f"{i:064x}",
                             size_bytes=100 + i, storage_uri=f"file:///nowhere/{i}", ir_version=8,
                             opset=17, producer="", inputs=[], outputs=[],
                             created_at=start + timedelta(minutes=i)))
    db_session.commit()
    newest_first = [f"m{i:03d}" for i in reversed(range(PAGE_SIZE + 3))]

    first = parse(signed_in_site.get("/ui/models").text)
    assert _names(first) == newest_first[:PAGE_SIZE]
    assert first.one("a", rel="next").attrs["href"] == f"/ui/models?offset={PAGE_SIZE}"
    assert not first.find_all("a", rel="prev")

    second = parse(signed_in_site.get(f"/ui/models?offset={PAGE_SIZE}").text)
    assert _names(second) == newest_first[PAGE_SIZE:]
    assert not second.find_all("a", rel="next")
    assert second.one("a", rel="prev").attrs["href"] == "/ui/models?offset=0"


def test_another_projects_model_is_not_listed_and_its_pages_are_404(
        signed_in_site: TestClient, headers: dict[str, str], db_session: Session,
        settings: Settings) -> None:
    mine = upload_model(signed_in_site, headers, small_cnn())
    _, other_key = new_key(db_session, settings)
    theirs = signed_in_site.post("/v1/models", headers=bearer(other_key),
                                 files={"file": ("theirs.onnx", model_bytes(small_cnn(seed=7)))}).json()

    page = parse(signed_in_site.get("/ui/models").text)

    assert [row.attrs["data-model-id"] for row in page.find_all("tr", data_model_id=True)] == [mine["id"]]
    for path in (f"/ui/models/{theirs['id']}", f"/ui/models/{theirs['id']}/new-job"):
        response = signed_in_site.get(path)
        assert response.status_code == 404, path
        assert "ModelNotFound" in response.text


def test_model_page_shows_signature_tables_its_jobs_and_the_new_job_link(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    model = upload_model(signed_in_site, headers, token_model(), name="tokens")
    other = upload_model(signed_in_site, headers, small_cnn())
    job = start_job(signed_in_site, headers, model["id"])
    start_job(signed_in_site, headers, other["id"])

    page = parse(signed_in_site.get(f"/ui/models/{model['id']}").text)

    assert page.one("h1").text == "tokens"
    assert page.by_id("new-job-link").attrs["href"] == f"/ui/models/{model['id']}/new-job"
    inputs = page.by_id("model-inputs")
    assert [[cell.text for cell in row.find_all() if cell.tag in ("th", "td")]
            for row in inputs.one("tbody").find_all("tr")] == [
        ["input_ids", "int64", "[batch, seq]", "batch, seq"],
        ["mask", "float32", "[batch, ?]", "batch, unnamed"],
        ["position", "int64", "[1, 4]", "none"]]
    outputs = page.by_id("model-outputs").find_all("tr", data_tensor=True)
    assert [row.attrs["data-tensor"] for row in outputs] == ["scores", "position_out"]
    assert page.one("dd", class_="opset").text == "13"
    [row] = page.by_id("model-job-list").find_all("tr", data_job_id=True)
    assert row.attrs["data-job-id"] == job["id"] and row.attrs["data-status"] == "queued"
    assert row.one("a").attrs["href"] == f"/ui/jobs/{job['id']}"
    assert row.one("span", class_="status").text == "queued"


def test_model_without_jobs_says_so(signed_in_site: TestClient, headers: dict[str, str]) -> None:
    model = upload_model(signed_in_site, headers, small_cnn())
    page = parse(signed_in_site.get(f"/ui/models/{model['id']}").text)
    assert "No jobs for this model yet" in page.by_id("model-jobs").one("p", class_="empty").text
    assert "No benchmarked engine yet" in page.by_id("benchmark-history").text


def test_model_page_shows_engine_benchmarks_per_configuration_with_regressions(
        signed_in_site: TestClient, db_session: Session, api_key: tuple[uuid.UUID, str]) -> None:
    project = api_key[0]
    model_id = insert_model(db_session, project)
    jobs = []
    for n, regression in enumerate((None, {"detail": "1.29× slower", "against_job": "x"})):
        doc = document("onnxruntime_ablation")
        engine = next(b for b in doc["benchmarks"]
                      if b["suite"] == "comparison" and b["variant"] == "engine")
        engine.update(config_key="c0ffee0000000001", environment_key="e0", regression=regression,
                      speedup_vs_reference=1.2 - 0.3 * n, speedup_ci_low=1.1 - 0.3 * n,
                      speedup_ci_high=1.3 - 0.3 * n, speedup_verdict="faster" if n == 0 else "slower",
                      latency_ms_p50_ci_low=0.1, latency_ms_p50_ci_high=0.2)
        jobs.append(insert_job(db_session, project, model_id, doc))

    page = parse(signed_in_site.get(f"/ui/models/{model_id}").text)

    [table] = page.by_id("benchmark-history").find_all("table", class_="history")
    rows = table.one("tbody").find_all("tr")
    assert {row.attrs["data-job-id"] for row in rows} == set(jobs)
    assert [("regression" in row.text) for row in rows].count(True) == 1
    assert "onnxruntime" in table.one("caption").text


def test_unknown_model_page_is_404_naming_the_model(signed_in_site: TestClient) -> None:
    missing = uuid.uuid4()
    response = signed_in_site.get(f"/ui/models/{missing}")
    assert response.status_code == 404
    assert "ModelNotFound" in response.text and str(missing) in response.text


def _wide_model(db_session: Session, project: uuid.UUID) -> Model:
    """A model as real exports name them: a long file name, 40 outputs with path-like names."""
    outputs = [{"name": f"/model/decoder/layers.{i}/self_attn/k_proj/Add_output_0",
                "dtype": "float32", "shape": ["batch_size", 12, "past_sequence_length + 1", 64]}
               for i in range(40)]
    model = Model(project_id=project, name="decoder_model_merged_quantized_" + "x" * 120 + ".onnx",
                  sha256="ab" * 32, size_bytes=1 << 30, storage_uri="store://models/wide.onnx",
                  ir_version=8, opset=17, producer="pytorch",
                  inputs=[{"name": "input_ids", "dtype": "int64", "shape": ["batch", "seq"]}],
                  outputs=outputs)
    db_session.add(model)
    db_session.commit()
    return model


def test_wide_models_fit_the_table_their_detail_on_the_model_page(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    """The table lays out at the page's width (fixed layout, each column a share of it); a long
    name is clipped with the whole in its title, and a row lists the first 4 outputs and links
    to the model page for the other 36, which lists all 40."""
    model = _wide_model(db_session, project)
    page = parse(signed_in_site.get("/ui/models").text)

    table = page.by_id("models")
    assert "fit" in table.attrs["class"].split()
    assert len(table.one("colgroup").find_all("col")) == len(table.one("thead").find_all("th"))
    row = _row(page, str(model.id))
    name = row.one("th", class_="model-name").one("a")
    assert "clip" in name.attrs["class"].split() and name.attrs["title"] == model.name
    outputs = row.one("td", class_="outputs")
    shown = outputs.find_all("li")
    assert len(shown) == 4
    assert shown[0].attrs["title"] == (
        "/model/decoder/layers.0/self_attn/k_proj/Add_output_0 float32 "
        "[batch_size, 12, past_sequence_length + 1, 64]")
    more = outputs.one("div", class_="more-tensors").one("a")
    assert more.text == "+ 36 more"
    assert more.attrs["href"] == f"/ui/models/{model.id}#model-outputs"
    assert len(row.one("td", class_="inputs").find_all("li")) == 1  # nothing more to link
    assert not row.one("td", class_="inputs").find_all("div", class_="more-tensors")

    detail = parse(signed_in_site.get(f"/ui/models/{model.id}").text)
    assert len(detail.by_id("model-outputs").one("tbody").find_all("tr")) == 40

