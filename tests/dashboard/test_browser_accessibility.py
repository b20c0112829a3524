"""Every page passes axe-core's WCAG 2 A/AA rules (no serious or critical violation), empty and
with jobs; every form control has a name; the keyboard alone reaches the filters and the
upload."""

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.dashboard.browser import assert_accessible, screenshot, tab_until, unlabelled_controls
from tests.dashboard.browser_stack import OpenPage, Project, Seeded, new_project
from tests.e2e.stacks import Stack

pytestmark = pytest.mark.e2e


def _control(tag: str, name: str) -> Callable[[dict[str, str]], bool]:
    return lambda el: el["tag"] == tag and el["name"] == name


def _visit(page: Page, path: str, name: str) -> None:
    response = page.goto(path)
    assert response is not None and response.ok, (
        f"{path} answered {response and response.status}: {page.content()[:500]}")
    assert_accessible(page, f"{name} ({path})")
    screenshot(page, name)


@pytest.fixture(scope="module")
def empty_project(dashboard_stack: Stack) -> Project:
    return new_project(dashboard_stack, "empty")


@pytest.mark.parametrize(("path", "name"), [
    ("/ui/jobs", "jobs-empty"), ("/ui/models", "models-empty"), ("/ui/compare", "compare-empty"),
    ("/ui/workers", "workers"), ("/ui/datasets", "datasets-empty"),
])
def test_pages_of_a_project_without_models_are_accessible_and_say_so(
        open_page: OpenPage, empty_project: Project, path: str, name: str) -> None:
    page = open_page(empty_project, path)
    _visit(page, path, name)
    if path != "/ui/workers":  # the stack's worker is online
        assert page.locator("p.empty").count() == 1, f"{path} has no empty-state message"


@pytest.mark.parametrize(("path", "name"), [
    ("/ui/jobs", "jobs"),
    ("/ui/jobs/{ablation}", "job-succeeded"),
    ("/ui/jobs/{failed}", "job-failed"),
    ("/ui/models", "models"),
    ("/ui/models/{model}", "model"),
    ("/ui/models/{model}/new-job", "new-job"),
    ("/ui/models/{model}/new-job?from_job={ablation}", "new-job-from-job"),
    ("/ui/compare?job={ablation}&job={plain}", "compare"),
    ("/ui/workers", "workers-busy"),
])
def test_pages_with_jobs_are_accessible(open_page: OpenPage, seeded: Seeded, path: str,
                                        name: str) -> None:
    ids = {"ablation": seeded.finished(seeded.ablation)["id"],
           "plain": seeded.finished(seeded.plain)["id"],
           "failed": seeded.finished(seeded.failed, "failed")["id"], "model": seeded.model_id}
    path = path.format(**ids)
    page = open_page(seeded.project)
    _visit(page, path, name)
    if name == "compare":
        table = page.locator("table#comparison")
        expect(table, "the compare page has no table#comparison").to_be_visible()
        for job_id in (ids["ablation"], ids["plain"]):
            assert job_id[:8] in table.inner_text() or table.locator(
                f'a[href="/ui/jobs/{job_id}"]').count(), f"job {job_id} is not compared"


def test_every_form_control_has_a_name(open_page: OpenPage, seeded: Seeded) -> None:
    page = open_page(seeded.project, "/ui/jobs")
    missing = {}
    for path in ("/ui/jobs", "/ui/models", f"/ui/models/{seeded.model_id}/new-job"):
        page.goto(path)
        if found := unlabelled_controls(page):
            missing[path] = found
    assert not missing, f"form controls without a label or accessible name: {missing}"


def test_keyboard_reaches_the_job_filters_and_the_upload(open_page: OpenPage,
                                                         seeded: Seeded) -> None:
    page = open_page(seeded.project, "/ui/jobs")
    expect(page.locator("form#job-filters"), "the jobs page has no form#job-filters").to_be_visible()
    for tag, name in (("select", "status"), ("select", "backend"), ("input", "q")):
        tab_until(page, _control(tag, name))

    page.goto("/ui/models")
    tab_until(page, lambda el: el["id"] == "upload-file" and el["type"] == "file")
