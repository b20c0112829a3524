"""Who the browser is: its API key from the session cookie (none with auth off), the CSRF token
its pages carry, and the REST API as that browser. Pages depend on `BrowserDep`; a browser
without a session is sent to the sign-in page."""

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from api.deps import SettingsDep
from core.api_keys import server_secret
from core.browser_sessions import ANONYMOUS, CSRF_FIELD, SESSION_COOKIE, csrf_matches, csrf_token
from dashboard.rest import RestApi

__all__ = [
    "Browser", "BrowserDep", "FormRejected", "SignInRequired", "checked_form", "get_browser", "safe_next",
]


class SignInRequired(Exception):
    """No session cookie while API keys are on: the page answers with a redirect to sign in."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class FormRejected(Exception):
    """A dashboard form posted without this browser's CSRF token."""


@dataclass(frozen=True)
class Browser:
    key: str | None  # None: auth is off, every request acts as the default project
    csrf: str
    api: RestApi

    @property
    def signed_in(self) -> bool:
        return self.key is not None


async def get_browser(request: Request, settings: SettingsDep) -> Browser:
    secret = server_secret(settings)
    if not settings.auth.enabled:
        return Browser(key=None, csrf=csrf_token(secret, ANONYMOUS), api=RestApi(request.app, None))
    key = request.cookies.get(SESSION_COOKIE, "").strip()
    if not key:
        raise SignInRequired(_here(request))
    return Browser(key=key, csrf=csrf_token(secret, key), api=RestApi(request.app, key))


BrowserDep = Annotated[Browser, Depends(get_browser)]


async def checked_form(request: Request, browser: Browser, settings: SettingsDep) -> dict[str, str]:
    """The posted form's fields, once its CSRF token is this browser's."""
    form = await request.form()
    fields = {name: value for name, value in form.items() if isinstance(value, str)}
    if not csrf_matches(server_secret(settings), browser.key or ANONYMOUS, fields.get(CSRF_FIELD)):
        raise FormRejected(f"the form posted to {request.url.path} carried no valid CSRF token")
    return fields


def _here(request: Request) -> str:
    path = request.url.path
    if request.url.query:
        path += "?" + request.url.query
    return quote(path, safe="/")  # one query parameter: its own ? and & encoded


def safe_next(path: str | None) -> str:
    """Where to go after signing in: a dashboard path only, never another site."""
    if path and path.startswith("/ui/") and not path.startswith("//") and "\\" not in path:
        return path
    return "/ui/jobs"
