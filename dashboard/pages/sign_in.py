"""Sign in with an API key (kept in an HttpOnly, SameSite=Strict session cookie) and sign out.

The sign-in form has no session to derive a CSRF token from, so it gets its own: a random nonce
in a short-lived cookie, and the form's token is the HMAC of that nonce (a cross-site page can
neither read the cookie nor compute the token)."""

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from api.deps import SettingsDep
from core.api_keys import server_secret
from core.browser_sessions import SESSION_COOKIE, csrf_matches, csrf_token
from dashboard.rest import RestApi, RestError
from dashboard.signed_in import BrowserDep, checked_form, safe_next
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()

_NONCE_COOKIE = "fuseforge_sign_in"
_SESSION_MAX_AGE_S = 12 * 3600  # a browser signs in again each working day


def _sign_in_page(request: Request, settings: SettingsDep, *, next_path: str, status_code: int = 200,
                  problem: str | None = None) -> Response:
    nonce = secrets.token_urlsafe(24)
    response = render(request, None, "sign_in.html", status_code=status_code, next_path=next_path,
                      problem=problem,
                      sign_in_token=csrf_token(server_secret(settings), f"sign-in:{nonce}"))
    response.set_cookie(_NONCE_COOKIE, nonce, max_age=3600, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/ui/sign-in")
    return response


@router.get("/ui/sign-in")
async def sign_in_form(request: Request, settings: SettingsDep,
                       next: Annotated[str | None, Query(max_length=2000)] = None,
                       expired: bool = False) -> Response:
    if not settings.auth.enabled:
        return RedirectResponse(safe_next(next), status_code=303)
    problem = "Your key is no longer accepted (revoked or expired): sign in again." if expired else None
    return _sign_in_page(request, settings, next_path=safe_next(next), problem=problem)


@router.post("/ui/sign-in")
async def sign_in(request: Request, settings: SettingsDep,
                  api_key: Annotated[str, Form(max_length=500)] = "",
                  csrf_token_: Annotated[str, Form(alias="csrf_token", max_length=200)] = "",
                  next_path: Annotated[str, Form(alias="next", max_length=2000)] = "") -> Response:
    destination = safe_next(next_path)
    if not settings.auth.enabled:
        return RedirectResponse(destination, status_code=303)
    nonce = request.cookies.get(_NONCE_COOKIE, "")
    if not nonce or not csrf_matches(server_secret(settings), f"sign-in:{nonce}", csrf_token_):
        return _sign_in_page(request, settings, next_path=destination, status_code=403,
                             problem="The sign-in form had expired or came from another site: "
                                     "enter your key again.")
    key = api_key.strip()
    if not key:
        return _sign_in_page(request, settings, next_path=destination, status_code=422,
                             problem="Enter an API key (`fuseforge apikey create --project "
                                     "<project> --name <name>` makes one).")
    try:
        await RestApi(request.app, key).get("/v1/project")
    except RestError as err:
        if err.status_code != 401:
            raise
        return _sign_in_page(request, settings, next_path=destination, status_code=401,
                             problem="That key was not accepted: it is unknown, revoked or "
                                     "expired. Check it, or make a new one with `fuseforge "
                                     "apikey create`.")
    response = RedirectResponse(destination, status_code=303)
    response.set_cookie(SESSION_COOKIE, key, max_age=_SESSION_MAX_AGE_S, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    response.delete_cookie(_NONCE_COOKIE, path="/ui/sign-in")
    return response


@router.post("/ui/sign-out")
async def sign_out(request: Request, browser: BrowserDep, settings: SettingsDep) -> Response:
    await checked_form(request, browser, settings)
    response = RedirectResponse("/ui/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
