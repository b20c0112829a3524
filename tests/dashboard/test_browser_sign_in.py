"""Signing in through the browser: a page asked for without a session leads to the sign-in page,
a wrong key is refused there in words, the right key lands on the page first asked for."""

import re

import pytest
from playwright.sync_api import Browser, expect

from tests.dashboard.browser import assert_accessible, screenshot
from tests.dashboard.browser_stack import OpenPage, Project
from tests.e2e.stacks import Stack

pytestmark = pytest.mark.e2e


def test_wrong_key_is_refused_on_an_accessible_sign_in_page(
        dashboard_browser: Browser, dashboard_stack: Stack) -> None:
    context = dashboard_browser.new_context(base_url=dashboard_stack.base_url, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto("/ui/jobs?status=failed")
        expect(page).to_have_url(re.compile(r"/ui/sign-in\?next=/ui/jobs%3Fstatus%3Dfailed$"))
        assert_accessible(page, "sign-in page")
        screenshot(page, "sign-in")

        page.get_by_label("API key").fill("ff_not_a_key_anyone_made")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#sign-in-problem")).to_contain_text("was not accepted")
        assert "/ui/sign-in" in page.url
        assert_accessible(page, "sign-in page with the refusal")
        screenshot(page, "sign-in-refused")
    finally:
        context.close()


def test_signed_in_browser_lands_on_the_empty_jobs_page(open_page: OpenPage,
                                                        fresh_project: Project) -> None:
    page = open_page(fresh_project, "/ui/jobs")

    expect(page.locator("p.empty")).to_contain_text("No jobs yet")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert_accessible(page, "jobs page, no jobs")
    screenshot(page, "jobs-empty")
