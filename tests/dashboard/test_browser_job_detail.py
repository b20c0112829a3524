"""A job's page in the browser: its charts draw the job's own numbers (counted from the API's
JSON, not written down here), a failed job shows its error and where the engine diverged, a
queued job is cancelled with its button, and "Run again with…" opens the form from the job."""

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from optimizer.testing.models import model_bytes, small_cnn
from tests.dashboard.browser import screenshot
from tests.dashboard.browser_stack import OpenPage, Project, Seeded

pytestmark = pytest.mark.e2e


def _chart(page: Page, name: str) -> Locator:
    chart = page.locator(f'svg.chart[data-chart="{name}"]')
    expect(chart, f"no {name} chart on {page.url}").to_have_count(1)
    expect(chart).to_have_attribute("role", "img")
    named = chart.evaluate("""(svg) => Boolean((svg.getAttribute("aria-label") || "").trim()
                                               || (svg.querySelector("title")?.textContent || "").trim())""")
    assert named, f"the {name} chart has neither an aria-label nor a <title>"
    has_table = chart.evaluate("(svg) => Boolean(svg.closest('section')?.querySelector('table'))")
    assert has_table, f"the {name} chart's section does not give its data as a table too"
    return chart


def test_charts_draw_one_bar_per_number_of_the_job(open_page: OpenPage, seeded: Seeded) -> None:
    job = seeded.finished(seeded.ablation)
    page = open_page(seeded.project, f"/ui/jobs/{job['id']}")

    report = job["fusion_report"]
    op_types = set(report["ops_before"]) | set(report["ops_after"])
    bars = _chart(page, "op-histogram").locator("rect.bar")
    expect(bars, f"op types before/after: {sorted(op_types)}").to_have_count(2 * len(op_types))

    ablation = [b for b in job["benchmarks"] if b["suite"] == "ablation"]
    assert ablation, "the seeded job ran no ablation"
    expect(_chart(page, "ablation").locator("rect.bar")).to_have_count(len(ablation))

    comparison = [b for b in job["benchmarks"] if b["suite"] == "comparison"]
    assert {b["variant"] for b in comparison} == {"original", "original_unoptimized", "engine"}
    latency = _chart(page, "latency").locator("rect.bar").count()
    assert latency >= len(comparison) and latency % len(comparison) == 0, (
        f"{latency} latency bars for {len(comparison)} variants: each variant should draw the "
        "same number of bars")
    for section in ("#stages", "#fusion", "#ablation", "#validation", "#benchmarks", "#events",
                    "#artifacts"):
        expect(page.locator(section), f"no {section} section").to_have_count(1)
    screenshot(page, "job-charts")


def test_failed_job_shows_its_error_code_and_the_localisation(open_page: OpenPage,
                                                              seeded: Seeded) -> None:
    job = seeded.finished(seeded.failed, "failed")
    page = open_page(seeded.project, f"/ui/jobs/{job['id']}")

    expect(page.locator("h1 span.status")).to_have_text("failed")
    expect(page.locator("#error .error-code")).to_have_text(job["error"]["code"])
    expect(page.locator("#error")).to_contain_text(job["error"]["message"].split("\n")[0][:60])
    localization = job["accuracy_report"]["localization"]
    assert localization["node"], "the failed job's accuracy report has no localisation"
    expect(page.locator("#localisation")).to_contain_text(localization["node"])
    expect(page.locator("form#cancel-job")).to_have_count(0)
    screenshot(page, "job-failed")


def test_queued_job_is_cancelled_from_its_page(open_page: OpenPage, fresh_project: Project) -> None:
    model = fresh_project.upload(model_bytes(small_cnn(seed=33)), "waiting_cnn.onnx")
    # No worker of this stack builds TensorRT engines: the job waits, queued, saying why (and
    # where one could, a long benchmark keeps it running until it is cancelled).
    job = fresh_project.submit(model["id"], backend="tensorrt",
                               benchmark={"warmup": 0, "iterations": 5000})
    page = open_page(fresh_project, "/ui/workers")

    if job["status_detail"]:
        waiting = page.locator("#waiting-jobs")
        expect(waiting, "the workers page has no #waiting-jobs for a waiting job").to_be_visible()
        detail = fresh_project.job(job["id"])["status_detail"]
        text = waiting.inner_text()
        assert detail in text or job["status_detail"] in text, (
            f"#waiting-jobs does not give the reason {detail!r}: {text!r}")
        screenshot(page, "workers-waiting")

    page.goto(f"/ui/jobs/{job['id']}")
    expect(page.locator("h1 span.status")).to_have_text(re.compile("queued|running"))
    page.locator("form#cancel-job").get_by_role("button", name="Cancel job").click()
    expect(page.locator("h1 span.status")).to_have_text("cancelled", timeout=30_000)
    expect(page.locator("form#cancel-job")).to_have_count(0)
    assert fresh_project.job(job["id"])["status"] == "cancelled"
    screenshot(page, "job-cancelled")


def test_run_again_opens_the_form_filled_from_the_job(open_page: OpenPage, seeded: Seeded) -> None:
    job = seeded.finished(seeded.plain)
    page = open_page(seeded.project, f"/ui/jobs/{job['id']}")

    link = page.locator("a#run-again")
    expect(link).to_have_attribute(
        "href", f"/ui/models/{seeded.model_id}/new-job?from_job={job['id']}")
    link.click()
    expect(page.locator("form#new-job")).to_be_visible()
    expect(page.locator("form#new-job select[name=backend]")).to_have_value(job["config"]["backend"])


def _nothing_to_quantize() -> bytes:
    """A model int8 cannot touch: no MatMul/Gemm for dynamic quantization, and the job names
    no calibration dataset for static."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32)[None], "scale")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["input", "scale"], ["scaled"], name="mul"),
         helper.make_node("Relu", ["scaled"], ["output"], name="relu")],
        "untouchable", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8])], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def test_an_int8_job_that_shipped_fp32_says_so_first_on_its_page_and_in_the_jobs_list(
        open_page: OpenPage, fresh_project: Project) -> None:
    model = fresh_project.upload(_nothing_to_quantize(), "untouchable.onnx")
    submitted = fresh_project.submit(model["id"], precision="int8",
                                     benchmark={"warmup": 1, "iterations": 5,
                                                "measure_memory": False})
    job = fresh_project.wait_for_job(submitted["id"])
    assert job["status"] == "succeeded", job["error"]
    outcome = job["outcome"]
    assert (outcome["asked"]["precision"], outcome["shipped"]["precision"]) == ("int8", "fp32")

    page = open_page(fresh_project, f"/ui/jobs/{job['id']}")
    # The first screen: the headline (the API's words), why, and the download.
    expect(page.locator("#outcome-headline")).to_have_text(outcome["headline"])
    expect(page.locator("#outcome-headline")).to_contain_text("fp32 engine (int8 asked)")
    expect(page.locator("#outcome-why")).to_contain_text("no int8 form was tried")
    download = page.locator("a#download-engine")
    expect(download).to_be_visible()
    box = download.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box  # above the fold
    # The long sections are folded below it: their charts are not drawn until opened.
    expect(page.locator("#stages details.fold")).not_to_have_attribute("open", "")
    expect(page.locator('#fusion svg.chart[data-chart="op-histogram"]')).to_be_hidden()
    screenshot(page, "job-outcome-card")

    jobs = open_page(fresh_project, "/ui/jobs")
    jobs.set_viewport_size({"width": 1400, "height": 900})
    row = jobs.locator(f'table#jobs tr[data-job-id="{job["id"]}"]')
    expect(row.locator("td.outcome-cell")).to_contain_text(outcome["headline"])
    # The table fits 1,400 px: nothing of its last column is cut or scrolled to.
    fits = jobs.evaluate("""() => {
        const table = document.getElementById("jobs");
        return table.getBoundingClientRect().right <= document.documentElement.clientWidth
            && table.parentElement.scrollWidth <= table.parentElement.clientWidth;
    }""")
    assert fits, "the jobs table is wider than a 1,400 px window"
    screenshot(jobs, "jobs-outcome-column")
