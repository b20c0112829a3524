"""The browser tests' own tools catch what they are for: axe fails a page with an unlabelled
field and names the rule and the element, a clean page passes; the label check and the Tab walk
find what is there and say what is not."""

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

from tests.dashboard.browser import assert_accessible, tab_until, unlabelled_controls

pytestmark = pytest.mark.e2e

_CLEAN = """<!doctype html><html lang="en"><head><title>Clean</title></head><body><main>
<h1>Clean</h1><form><label for="q">Model name</label><input id="q" name="q">
<button type="submit">Search</button></form></main></body></html>"""
_UNLABELLED = """<!doctype html><html lang="en"><head><title>Broken</title></head><body><main>
<h1>Broken</h1><form><input id="nameless" name="q"><select name="status"><option>x</option>
</select></form></main></body></html>"""


@pytest.fixture
def page(dashboard_browser: Browser) -> Iterator[Page]:
    context = dashboard_browser.new_context()
    yield context.new_page()
    context.close()


def test_axe_passes_a_clean_page(page: Page) -> None:
    page.set_content(_CLEAN)
    assert_accessible(page)
    assert unlabelled_controls(page) == []


def test_axe_fails_an_unlabelled_field_naming_rule_and_element(page: Page) -> None:
    page.set_content(_UNLABELLED)
    with pytest.raises(AssertionError) as failure:
        assert_accessible(page, "broken page")
    message = str(failure.value)
    assert message.startswith("broken page: 2 serious/critical")
    assert "- label (critical)" in message and "#nameless" in message
    assert "- select-name (critical)" in message
    assert len(unlabelled_controls(page)) == 2


def test_tab_walk_reaches_a_field_or_says_where_focus_went(page: Page) -> None:
    page.set_content(_CLEAN)
    assert tab_until(page, lambda el: el["name"] == "q") == ["input#q[name=q]"]
    with pytest.raises(AssertionError, match=r"input#q\[name=q\] → button\(Search\)"):
        tab_until(page, lambda el: el["name"] == "absent", limit=2)
