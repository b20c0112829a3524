"""GET /docs, the Swagger UI, served with its assets from this server: the page FastAPI makes
by default loads them from a CDN, which a deployment without internet access cannot reach.

The assets are the swagger-ui-bundle package's copy of Swagger UI's dist files. ReDoc ships in
no such package, so /redoc is off rather than a blank page.
"""

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

__all__ = ["DOCS_ASSETS_URL", "DOCS_URL", "serve_docs"]

DOCS_URL = "/docs"
DOCS_ASSETS_URL = "/docs/assets"
_OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"


def serve_docs(app: FastAPI) -> None:
    """Add /docs and its assets to `app` (made with docs_url=None and redoc_url=None)."""
    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=swagger_ui_path), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} API",
            oauth2_redirect_url=_OAUTH2_REDIRECT_URL,
            swagger_js_url=f"{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS_URL}/favicon-32x32.png")

    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    app.add_api_route(DOCS_URL, swagger_ui, include_in_schema=False)
    app.add_api_route(_OAUTH2_REDIRECT_URL, oauth2_redirect, include_in_schema=False)
