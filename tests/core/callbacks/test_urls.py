"""Callback URLs in the job config: http(s), a host, no credentials, bounded length."""

import pytest
from pydantic import ValidationError

from core.callbacks.urls import MAX_CALLBACK_URL_LENGTH, callback_url_problem
from core.job_config import JobConfig


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://example.com/hook", "scheme must be http or https"),
    ("example.com/hook", "scheme must be http or https"),
    ("https://user:pw@example.com/hook", "must not carry credentials"),
    ("https://token@example.com/hook", "must not carry credentials"),
    ("https:///hook", "has no host"),
    ("https://example.com:99999/hook", "invalid port"),
    ("https://example.com/a b", "whitespace"),
    ("https://example.com/hook#frag", "fragment"),
    ("https://example.com/" + "a" * MAX_CALLBACK_URL_LENGTH, "at most 2048"),
])
def test_bad_callback_urls_are_refused_saying_why(url: str, problem: str) -> None:
    found = callback_url_problem(url)
    assert found is not None and problem in found


@pytest.mark.parametrize("url", ["https://hooks.example.com/fuseforge?x=1",
                                 "http://127.0.0.1:8080/hook", "https://[2001:db8::1]/h"])
def test_well_formed_callback_urls_pass(url: str) -> None:
    assert callback_url_problem(url) is None
    assert JobConfig(callback_url=url).callback_url == url


def test_the_job_config_refuses_a_bad_callback_url_with_its_own_message() -> None:
    with pytest.raises(ValidationError) as refused:
        JobConfig(callback_url="ftp://example.com/hook")
    [error] = refused.value.errors()
    assert error["loc"] == ("callback_url",)
    assert error["msg"] == "the scheme must be http or https, not 'ftp'"
