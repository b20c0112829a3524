"""The REST API, called in-process by the pages as the signed-in browser would call it.

httpx's ASGI transport runs a request through the whole app (authentication, validation, error
shape) without a socket, so a page sees exactly what a pipeline sees.
"""

from typing import Any

import httpx
from starlette.types import ASGIApp

__all__ = ["RestApi", "RestError"]


class RestError(Exception):
    """The API refused or failed: its status code and its `{"error", "detail"}` body."""

    def __init__(self, status_code: int, error: str, detail: str) -> None:
        super().__init__(f"{status_code} {error}: {detail}")
        self.status_code = status_code
        self.error = error
        self.detail = detail


class RestApi:
    """GET/POST to the API mounted in `app`, with the browser's key as a bearer token (None:
    auth is off). Every call answers parsed JSON or raises RestError."""

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        self._app = app
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self._call("GET", path, params=params)

    async def post(self, path: str, json: Any = None) -> Any:
        return await self._call("POST", path, json=json)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        transport = httpx.ASGITransport(app=self._app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fuseforge.internal",
                                     headers=self._headers) as client:
            params = kwargs.pop("params", None)
            if params is not None:  # drop unset filters: the API reads "" as a value
                kwargs["params"] = {k: v for k, v in params.items() if v not in (None, "")}
            response = await client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error_of(response)
        return response.json() if response.content else None


def _error_of(response: httpx.Response) -> RestError:
    try:
        body = response.json()
        return RestError(response.status_code, str(body["error"]), str(body["detail"]))
    except (ValueError, KeyError, TypeError):
        return RestError(response.status_code, "HTTPError", response.text[:500])
