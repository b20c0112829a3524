"""A person's first job in the browser: upload a model (file input, or a file dropped on the
drop zone), start a job with the form, watch its row on the jobs page reach "succeeded" without
reloading the page, then download the engine from the job's page."""

import base64
import hashlib
import re
from pathlib import Path

import onnx
import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.browser import assert_accessible, screenshot
from tests.dashboard.browser_stack import OpenPage, Project, save_model

pytestmark = pytest.mark.e2e

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
JOB_TIMEOUT_MS = 240_000

# Counts every change the page makes to the upload's progress bar (its value is an attribute),
# in sessionStorage, which outlives the navigation to the new-job form that follows the upload.
_WATCH_PROGRESS = """() => {
    const bar = document.querySelector("progress#upload-progress");
    if (!bar) return false;
    sessionStorage.setItem("progress-changes", "0");
    new MutationObserver((changes) => sessionStorage.setItem("progress-changes",
        String(Number(sessionStorage.getItem("progress-changes")) + changes.length)))
        .observe(bar, {attributes: true});
    return true;
}"""


def _new_job_form_url(page: Page) -> str:
    """Wait for the browser to land on a model's new-job form; its model id."""
    page.wait_for_url(re.compile(rf"/ui/models/{UUID}/new-job"), timeout=30_000)
    match = re.search(rf"/ui/models/({UUID})/new-job", page.url)
    assert match, page.url
    return match.group(1)


def test_model_uploaded_and_started_from_the_form_succeeds_live_on_the_jobs_page(
        open_page: OpenPage, fresh_project: Project, tmp_path: Path) -> None:
    model_file = save_model(tmp_path, "cnn_browser.onnx", seed=31)
    jobs_page = open_page(fresh_project, "/ui/jobs")
    expect(jobs_page.locator("p.empty")).to_contain_text("No jobs yet")
    jobs_page.evaluate("window.__noReload = true")

    # A second tab does the work while the first one only listens.
    work = jobs_page.context.new_page()
    work.goto("/ui/models")
    assert work.evaluate(_WATCH_PROGRESS), "the models page has no progress#upload-progress"
    work.set_input_files("#upload-file", str(model_file))
    model_id = _new_job_form_url(work)
    assert int(work.evaluate("sessionStorage.getItem('progress-changes')") or 0) > 0, (
        "the upload never moved progress#upload-progress")
    [model] = fresh_project.api.get("/v1/models").json()["items"]
    assert model["id"] == model_id and model_file.stem in model["name"]

    form = work.locator("form#new-job")
    expect(form).to_be_visible()
    assert_accessible(work, "new-job form")
    screenshot(work, "flow-new-job")
    form.locator("select[name=backend]").select_option("onnxruntime")
    form.get_by_role("button", name="Start job").click()
    work.wait_for_url(re.compile(rf"/ui/jobs/{UUID}$"), timeout=30_000)
    job_id = work.url.rsplit("/", 1)[1]
    assert fresh_project.job(job_id)["config"]["backend"] == "onnxruntime"

    row = jobs_page.locator(f'table#jobs tr[data-job-id="{job_id}"]')
    expect(row, "the new job never appeared on the open jobs page").to_be_attached(timeout=30_000)
    expect(row, "the job's row never reached succeeded without a reload").to_have_attribute(
        "data-status", "succeeded", timeout=JOB_TIMEOUT_MS)
    expect(row.locator("span.status")).to_have_text("succeeded")
    assert jobs_page.evaluate("window.__noReload") is True, "the jobs page reloaded itself"
    screenshot(jobs_page, "flow-jobs-live")

    job = fresh_project.wait_for_job(job_id, timeout=30)
    assert job["status"] == "succeeded", job["error"]
    engine = next(a for a in job["artifacts"] if a["name"] == "engine.onnx")
    # The open job page reloads itself once the job ends (dashboard/static/job_detail.js): a
    # goto here would race that reload (CI: "interrupted by another navigation").
    link = work.locator("a.artifact-download", has_text="engine.onnx")
    expect(link, "the job's page did not reload itself to show the finished job").to_be_visible(
        timeout=30_000)
    expect(link).to_have_attribute("href", re.compile(r"^/v1/jobs/"))
    with work.expect_download() as download:
        link.click()
    data = Path(download.value.path()).read_bytes()
    assert hashlib.sha256(data).hexdigest() == engine["sha256"]
    assert onnx.load_from_string(data).graph.node, "the downloaded engine has no nodes"
    screenshot(work, "flow-job-detail")


def test_model_dropped_on_the_drop_zone_is_uploaded(open_page: OpenPage, fresh_project: Project,
                                                   tmp_path: Path) -> None:
    model_file = save_model(tmp_path, "dropped_cnn.onnx", seed=32)
    page = open_page(fresh_project, "/ui/models")
    expect(page.locator("#upload-dropzone"), "the models page has no #upload-dropzone").to_be_visible()
    transfer = page.evaluate_handle(
        """([name, b64]) => {
            const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, {type: "application/octet-stream"}));
            return transfer;
        }""",
        [model_file.name, base64.b64encode(model_file.read_bytes()).decode()])
    for event in ("dragenter", "dragover", "drop"):
        page.dispatch_event("#upload-dropzone", event, {"dataTransfer": transfer})

    model_id = _new_job_form_url(page)
    [model] = fresh_project.api.get("/v1/models").json()["items"]
    assert model["id"] == model_id and model["name"].startswith("dropped_cnn")


def test_an_int8_job_started_from_the_form_calibrates_on_the_chosen_dataset(
        open_page: OpenPage, fresh_project: Project, tmp_path: Path) -> None:
    import io

    import numpy as np

    from optimizer.testing.models import model_bytes
    from optimizer.testing.quantization_models import calibration_images, conv_stack

    model = conv_stack(seed=41, size=16, blocks=1)
    uploaded = fresh_project.api.post("/v1/models", files={"file": ("convnet.onnx",
                                                                    model_bytes(model))})
    assert uploaded.status_code in (200, 201), uploaded.text
    buffer = io.BytesIO()
    np.savez(buffer, input=calibration_images(model, 5, seed=2))
    dataset = fresh_project.api.post("/v1/datasets", params={"role": "calibration"},
                                     files={"file": ("calib.npz", buffer.getvalue())})
    assert dataset.status_code == 201, dataset.text
    page = open_page(fresh_project, f"/ui/models/{uploaded.json()['id']}/new-job")

    form = page.locator("form#new-job")
    quantization = form.locator("fieldset#quantization")
    expect(quantization).to_be_hidden()  # fp32 by default: nothing to quantize
    form.locator("select[name=precision]").select_option("int8")
    expect(quantization).to_be_visible()
    quantization.locator("select[name='quantization.mode']").select_option("static")
    quantization.locator("select[name='quantization.calibration']").select_option(
        dataset.json()["id"])
    quantization.locator("select[name='quantization.method']").select_option("minmax")
    assert_accessible(page, "new-job form, int8")
    form.get_by_role("button", name="Start job").click()
    page.wait_for_url(re.compile(rf"/ui/jobs/{UUID}$"), timeout=30_000)
    job_id = page.url.rsplit("/", 1)[1]

    config = fresh_project.job(job_id)["config"]
    assert config["precision"] == "int8"
    assert config["quantization"]["mode"] == "static"
    assert config["quantization"]["calibration"] == dataset.json()["id"]
    job = fresh_project.wait_for_job(job_id, timeout=JOB_TIMEOUT_MS / 1000)
    assert job["status"] == "succeeded", job["error"]
    # The job page reloads itself when the job ends (job_detail.js); a reload of our own would
    # race that one (net::ERR_ABORTED), so wait for the reloaded page's panel instead.
    panel = page.locator("#quantization")
    expect(panel.locator("h3")).to_contain_text("shipped", timeout=30_000)
    screenshot(page, "flow-int8-job")


def test_a_search_job_started_from_the_form_ships_the_winner_of_its_race(
        open_page: OpenPage, fresh_project: Project) -> None:
    from optimizer.testing.models import model_bytes
    from optimizer.testing.quantization_models import conv_stack

    model = conv_stack(seed=43, channels=16, size=16, blocks=1)
    uploaded = fresh_project.api.post("/v1/models", files={"file": ("searched.onnx",
                                                                    model_bytes(model))})
    assert uploaded.status_code in (200, 201), uploaded.text
    page = open_page(fresh_project, f"/ui/models/{uploaded.json()['id']}/new-job")

    form = page.locator("form#new-job")
    options = form.locator("#search-options")
    expect(options).to_be_hidden()  # no search by default
    form.locator("input[name=search]").check()
    expect(options).to_be_visible()
    expect(form.locator("select[name=precision]")).to_be_disabled()  # the search picks it
    options.locator("select[name='search.strategy']").select_option("min_latency")
    options.locator("input[name='search.time_budget_s']").fill("60")
    expect(options.locator("input[name='search.pass_sets']")).to_be_checked()
    assert_accessible(page, "new-job form, search")
    form.get_by_role("button", name="Start job").click()
    page.wait_for_url(re.compile(rf"/ui/jobs/{UUID}$"), timeout=30_000)
    job_id = page.url.rsplit("/", 1)[1]

    config = fresh_project.job(job_id)["config"]
    assert config["search"]["strategy"] == "min_latency"
    assert config["search"]["time_budget_s"] == 60
    assert config["search"]["pass_sets"] is True
    assert config["precision"] == "fp32" and config["passes"] == "all"  # left to the search
    job = fresh_project.wait_for_job(job_id, timeout=JOB_TIMEOUT_MS / 1000)
    assert job["status"] == "succeeded", job["error"]
    report = job["search_report"]
    # A candidate won, or none beat the original and it shipped, saying why.
    assert report["winner"] or report["original"], report
    winner = report["winner"] or "your original model"
    assert winner in {row["name"] for row in report["rows"]} or not report["winner"]
    # The job page reloads itself when the job ends (job_detail.js): wait for the reloaded page.
    expect(page.locator("#search-winner")).to_contain_text(winner, timeout=30_000)
    rows = page.locator("#search-table tbody tr")
    expect(rows).to_have_count(len(report["rows"]))
    raced = sum("latency_ms_p50" in row for row in report["rows"])
    expect(page.locator("#search svg .point")).to_have_count(raced)
    assert_accessible(page, "job page with a search's table and chart")
    screenshot(page, "flow-search-job")


def test_a_tensorrt_search_from_the_form_may_also_race_onnxruntime(
        open_page: OpenPage, fresh_project: Project) -> None:
    from optimizer.testing.models import model_bytes
    from optimizer.testing.quantization_models import conv_stack

    model = conv_stack(seed=44, channels=8, size=8, blocks=1)
    uploaded = fresh_project.api.post("/v1/models", files={"file": ("gpu-search.onnx",
                                                                    model_bytes(model))})
    assert uploaded.status_code in (200, 201), uploaded.text
    page = open_page(fresh_project, f"/ui/models/{uploaded.json()['id']}/new-job")

    form = page.locator("form#new-job")
    form.locator("input[name=search]").check()
    also = form.locator("input[name='search.backends'][value=onnxruntime]")
    expect(also).to_be_hidden()  # an onnxruntime search runs on CPU workers: no GPU backend
    form.locator("select[name=backend]").select_option("tensorrt")
    expect(also).to_be_visible()
    also.check()
    assert_accessible(page, "new-job form, a tensorrt search that also tries onnxruntime")
    form.get_by_role("button", name="Start job").click()
    page.wait_for_url(re.compile(rf"/ui/jobs/{UUID}$"), timeout=30_000)
    job_id = page.url.rsplit("/", 1)[1]

    config = fresh_project.job(job_id)["config"]
    assert config["backend"] == "tensorrt"
    assert config["search"]["backends"] == ["tensorrt", "onnxruntime"]
    fresh_project.api.post(f"/v1/jobs/{job_id}/cancel")  # no GPU worker need build it
