"""The jobs page's live stream: when the API server goes away the banner says updates were
lost, and when it is back the page reconnects and the banner goes away by itself (no reload)."""

import re
import signal

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.dashboard.browser import screenshot
from tests.dashboard.browser_stack import OpenPage, Project
from tests.e2e.stacks import Stack

pytestmark = pytest.mark.e2e

# Keeps every EventSource the page opens, so the test can wait for the stream to be open.
_TRACK_STREAMS = """
window.__streams = [];
const NativeEventSource = window.EventSource;
window.EventSource = class extends NativeEventSource {
    constructor(...args) { super(...args); window.__streams.push(this); }
};
"""
_STREAM_OPEN = "() => window.__streams.some(s => s.readyState === EventSource.OPEN)"


def _wait_for_open_stream(page: Page, when: str) -> None:
    try:
        page.wait_for_function(_STREAM_OPEN, timeout=15_000)
    except PlaywrightTimeoutError:
        opened = page.evaluate("window.__streams.map(s => [s.url, s.readyState])")
        raise AssertionError(f"{when}, the jobs page had no open live stream within 15 s "
                             f"(EventSources [url, readyState]: {opened})") from None


def test_banner_says_the_stream_was_lost_and_clears_when_the_api_is_back(
        open_page: OpenPage, fresh_project: Project, dashboard_stack: Stack) -> None:
    page = open_page(fresh_project, "/ui/models")
    page.context.add_init_script(_TRACK_STREAMS)
    page.goto("/ui/jobs")
    _wait_for_open_stream(page, "after loading")
    banner = page.locator("#banner")
    expect(banner).to_be_hidden()
    page.evaluate("window.__noReload = true")

    dashboard_stack.api.stop(signal.SIGKILL)  # the server is gone, connections cut
    try:
        expect(banner, "no banner after the API server died").to_be_visible(timeout=15_000)
        expect(banner).to_contain_text(re.compile(r"lost|reconnect", re.IGNORECASE))
        screenshot(page, "jobs-stream-lost")
    finally:
        dashboard_stack.restart("api")

    expect(banner, "the banner stayed after the API server came back").to_be_hidden(timeout=45_000)
    _wait_for_open_stream(page, "after the API server came back")
    assert page.evaluate("window.__noReload") is True, "the page reloaded instead of reconnecting"
