"""Driving the dashboard in a real browser: the system's Chromium through Playwright (no browser
download: `playwright install` is never run), axe-core for accessibility, screenshots kept as
test output, and the waits the tests share, each bounded and saying what it waited for."""

from __future__ import annotations

import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

from tests.support.processes import REPO_ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

__all__ = [
    "AXE_JS",
    "SCREENSHOT_DIR",
    "assert_accessible",
    "launch_chromium",
    "no_browser",
    "screenshot",
    "sign_in",
    "system_chromium",
    "tab_until",
    "unlabelled_controls",
]

AXE_JS = Path(__file__).parent / "vendor" / "axe.min.js"
SCREENSHOT_DIR = REPO_ROOT / "test-output" / "dashboard"
# WCAG 2.0, 2.1 and 2.2 at levels A and AA: what the dashboard promises.
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
BLOCKING_IMPACTS = ("serious", "critical")


def system_chromium() -> str | None:
    """The Chromium that `make test` installs (scripts/browser.sh), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def no_browser(reason: str) -> None:
    """Skip the browser tests on a machine without Chromium, but fail them where they must run
    (CI sets FUSEFORGE_REQUIRE_BROWSER=1)."""
    if os.environ.get("FUSEFORGE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; FUSEFORGE_REQUIRE_BROWSER=1 says the browser tests must run here "
                    "(bash scripts/browser.sh installs Chromium)", pytrace=False)
    pytest.skip(f"{reason}: the dashboard's browser tests need it "
                "(`bash scripts/browser.sh`, or `apt-get install chromium`)")


def launch_chromium(playwright: Playwright) -> Browser:
    executable = system_chromium()
    if executable is None:
        no_browser("no chromium (or chromium-browser) on PATH")
    # Chromium refuses to sandbox itself as root (CI containers run as root).
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    return playwright.chromium.launch(executable_path=executable, headless=True, args=args)


def sign_in(page: Page, base_url: str, key: str, next_path: str = "/ui/jobs") -> None:
    """Sign in through the sign-in page, as a person does, and land on `next_path`."""
    page.goto(f"{base_url}/ui/sign-in?next={quote(next_path, safe='/')}")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}{next_path}")


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as test-output/dashboard/<name>.png (kept for people to look at)."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / f"{name}.png"
    # A screenshot is kept for people, not asserted on: where a CI machine busy with a job's
    # race leaves Chromium no time to paint, the test goes on and says so in its warnings.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.screenshot(path=str(path), full_page=True, timeout=60_000)
    except PlaywrightTimeout:
        warnings.warn(f"screenshot {name!r} not taken: Chromium did not paint within 60 s",
                      stacklevel=2)
    return path


def assert_accessible(page: Page, what: str | None = None) -> None:
    """Run axe-core's WCAG 2 A/AA rules on the page; fail on any serious or critical violation,
    listing each with its rule, impact, the elements and axe's one-line help."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE_JS))
    violations: list[dict[str, Any]] = page.evaluate(
        """async (tags) => {
            const result = await window.axe.run(document, {
                runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
                targets: v.nodes.map(n => n.target.join(" ")),
                summary: v.nodes.length ? v.nodes[0].failureSummary : ""}));
        }""",
        WCAG_TAGS,
    )
    blocking = [v for v in violations if v["impact"] in BLOCKING_IMPACTS]
    if blocking:
        lines = [f"{what or page.url}: {len(blocking)} serious/critical accessibility violation(s)"]
        for v in blocking:
            targets = "; ".join(v["targets"][:5]) + (" …" if len(v["targets"]) > 5 else "")
            lines.append(f"- {v['id']} ({v['impact']}): {v['help']}\n    on: {targets}\n"
                         f"    {v['summary']}".rstrip())
        raise AssertionError("\n".join(lines))


def unlabelled_controls(page: Page, scope: str = "body") -> list[str]:
    """The form controls under `scope` without an accessible name (a <label>, aria-label,
    aria-labelledby or title; a button's own text), described for a failure message."""
    found: list[str] = page.eval_on_selector(
        scope,
        """(root) => [...root.querySelectorAll("input, select, textarea, button")]
            .filter(el => el.type !== "hidden")
            .filter(el => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")
                          && !el.getAttribute("aria-labelledby") && !el.title
                          && !(el.tagName === "BUTTON" && el.textContent.trim())
                          && !(el.type === "submit" && el.value))
            .map(el => el.outerHTML.slice(0, 160))""",
    )
    return found


def tab_until(page: Page, matches: Callable[[dict[str, str]], bool], *, limit: int = 60) -> list[str]:
    """Press Tab from the top of the page until the focused element matches; return the focus
    path walked (for the failure message when it never does)."""
    # Focus a stand-in at the top of the body, so the first Tab goes where a fresh page's would.
    page.evaluate("""() => { const start = document.createElement("span");
                             start.tabIndex = -1; start.id = "__tab-start";
                             document.body.prepend(start); start.focus(); }""")
    walked: list[str] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        page.evaluate("() => document.getElementById('__tab-start')?.remove()")
        focused: dict[str, str] = page.evaluate(
            """() => { const el = document.activeElement;
                       return {tag: el.tagName.toLowerCase(), id: el.id || "",
                               name: el.getAttribute("name") || "", type: el.type || "",
                               text: (el.textContent || "").trim().slice(0, 30)}; }""")
        walked.append(_describe(focused))
        if matches(focused):
            return walked
    raise AssertionError(f"Tab never reached the control after {limit} presses; focus went: "
                         + " → ".join(walked))


def _describe(el: dict[str, str]) -> str:
    label = el["tag"] + (f"#{el['id']}" if el["id"] else "")
    if el["name"]:
        label += f"[name={el['name']}]"
    elif el["text"]:
        text = re.sub(r"\s+", " ", el["text"])
        label += f"({text})"
    return label
