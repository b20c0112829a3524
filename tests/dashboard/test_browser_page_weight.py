"""The jobs page of a project with 1,000 jobs stays light and quick: its first load (empty
cache) transfers under 300 KB in all and is interactive within a second (the quickest of up
to three cold loads, so a stall of a loaded CI machine is not counted as the page's); it
shows one page of 50 rows with a link to the next."""

import json
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response, expect

from optimizer.testing.models import model_bytes, small_cnn
from tests.dashboard.browser import SCREENSHOT_DIR, screenshot, sign_in
from tests.dashboard.browser_stack import NOTES, Project, insert_jobs, new_project
from tests.e2e.stacks import Stack

pytestmark = pytest.mark.e2e

JOBS = 1_000
MAX_BYTES = 300 * 1024
MAX_MS = 1_000.0
PAGE_ROWS = 50

_TIMINGS = """() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const resources = performance.getEntriesByType("resource");
    return {
        transfer: nav.transferSize + resources.reduce((sum, r) => sum + r.transferSize, 0),
        encoded: nav.encodedBodySize + resources.reduce((sum, r) => sum + r.encodedBodySize, 0),
        requests: 1 + resources.length,
        domContentLoaded: nav.domContentLoadedEventEnd - nav.startTime,
        load: nav.loadEventEnd - nav.startTime,
    };
}"""


@pytest.fixture(scope="module")
def busy_project(dashboard_stack: Stack) -> Project:
    """A project whose one model has 1,000 jobs, written straight to the database."""
    project = new_project(dashboard_stack, "busy")
    model = project.upload(model_bytes(small_cnn(seed=41)), "busy_cnn.onnx")
    insert_jobs(dashboard_stack.database_url, project_id=project.id, model_id=model["id"],
                count=JOBS)
    assert project.api.get("/v1/jobs", params={"limit": 1}).json()["total"] == JOBS
    return project


@pytest.fixture
def cold_browsers(dashboard_browser: Browser, busy_project: Project
                  ) -> Iterator[Callable[[], BrowserContext]]:
    """Browsers signed in to the busy project whose HTTP cache is empty, one a call: the
    session is carried over from the browser that signed in (on another page, so the jobs
    page's assets were never fetched)."""
    signing = dashboard_browser.new_context(base_url=busy_project.base_url)
    sign_in(signing.new_page(), busy_project.base_url, busy_project.key, "/ui/workers")
    state = signing.storage_state()
    signing.close()
    opened: list[BrowserContext] = []

    def cold() -> BrowserContext:
        context = dashboard_browser.new_context(base_url=busy_project.base_url,
                                                storage_state=state)
        context.set_default_timeout(15_000)
        opened.append(context)
        return context

    yield cold
    for context in opened:
        context.close()


def _first_load(context: BrowserContext) -> tuple[Page, dict[str, float], int]:
    """The jobs page loaded once with an empty cache: the page, its navigation timings and
    transfer sizes, and the bodies' decoded bytes."""
    page = context.new_page()
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    page.goto("/ui/jobs", wait_until="load")
    page.wait_for_function(
        "() => performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
    page.wait_for_timeout(500)  # what the page's scripts fetch right after load counts too
    timings = page.evaluate(_TIMINGS)
    # The bodies as the browser got them (decompressed), the live stream aside: it never ends.
    bodies = sum(len(r.body()) for r in responses
                 if "text/event-stream" not in (r.headers.get("content-type") or ""))
    return page, timings, bodies


def test_first_load_of_the_jobs_page_with_1000_jobs_is_light_and_quick(
        cold_browsers: Callable[[], BrowserContext]) -> None:
    page, timings, bodies = _first_load(cold_browsers())
    # The time is the quickest of up to three cold loads: a stall of the shared CI machine is
    # not the page's (the bytes are the same every time).
    loads = [timings["load"]]
    while max(timings["load"], timings["domContentLoaded"]) >= MAX_MS and len(loads) < 3:
        page, timings, bodies = _first_load(cold_browsers())
        loads.append(timings["load"])
    screenshot(page, "jobs-1000")

    figures = (f"jobs page, {JOBS} jobs, first load: {timings['transfer'] / 1024:.1f} KB "
               f"transferred ({timings['encoded'] / 1024:.1f} KB encoded bodies, "
               f"{bodies / 1024:.1f} KB decoded) in {timings['requests']} requests; "
               f"DOMContentLoaded {timings['domContentLoaded']:.0f} ms, "
               f"load {timings['load']:.0f} ms"
               + (f" (cold loads: {', '.join(f'{ms:.0f}' for ms in loads)} ms)"
                  if len(loads) > 1 else ""))
    print(figures)
    NOTES.append(figures)
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    (SCREENSHOT_DIR / "page-weight.json").write_text(
        json.dumps({**timings, "decoded": bodies, "jobs": JOBS}, indent=2))

    assert 0 < timings["transfer"] < MAX_BYTES, figures
    assert timings["domContentLoaded"] < MAX_MS, figures
    assert timings["load"] < MAX_MS, figures


def test_jobs_page_shows_one_page_of_50_rows_and_a_next_link(
        cold_browsers: Callable[[], BrowserContext]) -> None:
    page = cold_browsers().new_page()
    page.goto("/ui/jobs")
    expect(page.locator("table#jobs tr[data-job-id]")).to_have_count(PAGE_ROWS)
    next_link = page.locator("a[rel=next]").first
    expect(next_link).to_be_visible()
    next_link.click()
    expect(page.locator("table#jobs tr[data-job-id]")).to_have_count(PAGE_ROWS)
    expect(page.locator("a[rel=prev]").first).to_be_visible()
