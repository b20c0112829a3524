"""The app that `fuseforge serve` runs: the REST API (api/main.py) with the dashboard's pages
under /ui and their static assets, all from one process (no front-end server, no CDN)."""

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.http.lazy_app import app_on_first_use
from api.main import create_app
from core.browser_sessions import SESSION_COOKIE
from core.settings import Settings
from dashboard.pages import router
from dashboard.rest import RestError
from dashboard.signed_in import FormRejected, SignInRequired
from dashboard.templating import STATIC_DIR, render

__all__ = ["app", "create_site"]


async def _sign_in_first(_: Request, err: Exception) -> Response:
    assert isinstance(err, SignInRequired)
    return RedirectResponse(f"/ui/sign-in?next={err.next_path}", status_code=303)


async def _api_refused(request: Request, err: Exception) -> Response:
    """An API error behind a page: a key that stopped working sends the browser to sign in
    again; anything else is shown with the API's own code and message."""
    assert isinstance(err, RestError)
    if err.status_code == 401:
        response = RedirectResponse("/ui/sign-in?expired=1", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response
    return render(request, None, "error.html", status_code=err.status_code,
                  code=err.error, detail=err.detail)


async def _form_rejected(request: Request, err: Exception) -> Response:
    return render(request, None, "error.html", status_code=403, code="CsrfRejected",
                  detail=f"{err}; reload the page and submit the form again.")


def create_site(settings: Settings | None = None) -> FastAPI:
    app = create_app(settings)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")
    app.include_router(router)
    app.add_exception_handler(SignInRequired, _sign_in_first)
    app.add_exception_handler(RestError, _api_refused)
    app.add_exception_handler(FormRejected, _form_rejected)
    return app


app: FastAPI  # built on first use (uvicorn's "dashboard.site:app"): importing builds nothing
__getattr__ = app_on_first_use(__name__, create_site)
