"""Signing in to the dashboard: the key lands in an HttpOnly cookie only when the API accepts
it, every form and every cookie-signed API write needs the page's CSRF token."""

import re
import uuid

from fastapi.testclient import TestClient

from core.api_keys import server_secret
from core.browser_sessions import CSRF_HEADER, SESSION_COOKIE, csrf_token
from core.settings import Settings


def _form_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "the form carries no CSRF token"
    return match.group(1)


def test_page_without_session_redirects_to_sign_in(site: TestClient) -> None:
    response = site.get("/ui/jobs?status=failed")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/sign-in?next=/ui/jobs%3Fstatus%3Dfailed"


def test_sign_in_returns_to_a_page_with_several_parameters(site: TestClient,
                                                           api_key: tuple[uuid.UUID, str]) -> None:
    redirect = site.get("/ui/compare?job=a&job=b").headers["location"]
    form = site.get(redirect)
    assert 'value="/ui/compare?job=a&amp;job=b"' in form.text
    response = site.post("/ui/sign-in", data={"api_key": api_key[1], "next": "/ui/compare?job=a&job=b",
                                                "csrf_token": _form_token(form.text)})
    assert response.headers["location"] == "/ui/compare?job=a&job=b"


def test_sign_in_with_valid_key_sets_httponly_strict_cookie(
        site: TestClient, api_key: tuple[uuid.UUID, str]) -> None:
    form = site.get("/ui/sign-in")
    response = site.post("/ui/sign-in", data={"api_key": api_key[1], "next": "/ui/models",
                                                "csrf_token": _form_token(form.text)})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/models"
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Max-Age=43200" in cookie  # the README's 12 h session
    assert site.get("/ui/models").status_code == 200


def test_sign_in_with_unknown_key_says_so_and_sets_no_session(site: TestClient) -> None:
    form = site.get("/ui/sign-in")
    response = site.post("/ui/sign-in",
                         data={"api_key": "ff_not_a_key", "csrf_token": _form_token(form.text)})
    assert response.status_code == 401
    assert "was not accepted" in response.text
    assert SESSION_COOKIE not in response.cookies


def test_sign_in_without_form_token_is_refused(site: TestClient, api_key: tuple[uuid.UUID, str]) -> None:
    site.get("/ui/sign-in")
    response = site.post("/ui/sign-in", data={"api_key": api_key[1], "csrf_token": "0" * 64})
    assert response.status_code == 403
    assert SESSION_COOKIE not in response.cookies


def test_next_never_leaves_the_dashboard(site: TestClient, api_key: tuple[uuid.UUID, str]) -> None:
    form = site.get("/ui/sign-in")
    response = site.post("/ui/sign-in", data={"api_key": api_key[1], "next": "//evil.example/ui/",
                                                "csrf_token": _form_token(form.text)})
    assert response.headers["location"] == "/ui/jobs"


def test_api_reads_with_session_cookie_but_writes_only_with_csrf_header(
        signed_in_site: TestClient, settings: Settings, api_key: tuple[uuid.UUID, str]) -> None:
    assert signed_in_site.get("/v1/jobs").status_code == 200
    body = {"default_callback_url": None}
    refused = signed_in_site.patch("/v1/project", json=body)
    assert refused.status_code == 403
    assert refused.json()["error"] == "CsrfRejected"
    token = csrf_token(server_secret(settings), api_key[1])
    assert signed_in_site.patch("/v1/project", json=body, headers={CSRF_HEADER: token}).status_code == 200


def test_csrf_token_of_another_key_is_refused(signed_in_site: TestClient, settings: Settings) -> None:
    other = csrf_token(server_secret(settings), "ff_someone_else")
    response = signed_in_site.patch("/v1/project", json={"default_callback_url": None},
                                    headers={CSRF_HEADER: other})
    assert response.status_code == 403


def test_sign_out_needs_the_page_token_and_clears_the_cookie(signed_in_site: TestClient) -> None:
    assert signed_in_site.post("/ui/sign-out", data={"csrf_token": "nope"}).status_code == 403
    page = signed_in_site.get("/ui/jobs")
    response = signed_in_site.post("/ui/sign-out", data={"csrf_token": _form_token(page.text)})
    assert response.status_code == 303
    assert any(c.startswith(f'{SESSION_COOKIE}=""') for c in response.headers.get_list("set-cookie"))


def test_revoked_key_sends_the_browser_back_to_sign_in(site: TestClient) -> None:
    site.cookies.set(SESSION_COOKIE, "ff_revoked_or_never_was")
    response = site.get("/ui/jobs")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/sign-in?expired=1"


def test_every_page_renders_for_a_signed_in_browser(signed_in_site: TestClient) -> None:
    for path in ("/ui/jobs", "/ui/models", "/ui/compare", "/ui/workers"):
        response = signed_in_site.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert "<main" in response.text
    assert signed_in_site.get("/ui/static/dashboard.js").status_code == 200
