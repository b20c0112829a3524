"""Send one logical request to the API: authenticate it, retry it as `retry.py` allows, and turn
what went wrong into the client's error tree (`errors.py`)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from fuseforge_client.errors import (
    IDEMPOTENCY_CONFLICTS,
    ConnectionFailedError,
    IdempotencyConflictError,
    api_error,
)
from fuseforge_client.retry import RetryPolicy, retry_after_seconds, should_retry

__all__ = ["ApiSession"]

logger = logging.getLogger("fuseforge_client")

USER_AGENT = "fuseforge-client/0.1.0"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
_DETAIL_CHARS = 500  # of a non-JSON error body (a proxy's HTML page)


class ApiSession:
    """An httpx.Client bound to one FuseForge server, with retries and error mapping.

    `sleep` is how the session waits between tries (tests pass a recorder)."""

    def __init__(self, base_url: str, *, api_key: str | None, timeout_s: float,
                 retry: RetryPolicy, idempotent_posts: bool,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        headers = {"User-Agent": USER_AGENT}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url.rstrip("/")
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)
        # For the object store a download redirects to: its presigned URL is the credential,
        # so this client carries no API key (nor the API's cookies).
        self._store_http = httpx.Client(headers={"User-Agent": USER_AGENT}, timeout=timeout,
                                        transport=transport)
        self._retry = retry
        self._idempotent_posts = idempotent_posts
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()
        self._store_http.close()

    def request(self, method: str, path: str, *, stream: bool = False,
                idempotency_key: bool = False, to_store: bool = False,
                **kwargs: Any) -> httpx.Response:
        """The successful (2xx) response to `method path`; `kwargs` go to httpx's
        build_request. With `stream`, the body is not read yet: close the response. With
        `idempotency_key`, every try carries the same fresh Idempotency-Key header. With
        `to_store`, a 307 (an artifact download from an object store) is followed, without
        the API key.

        Raises:
            ConnectionFailedError: no answer after the retries allowed.
            ApiError: (a subclass by status) an error answer, after the retries allowed.
        """
        key = str(uuid.uuid4()) if idempotency_key else None
        if key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), IDEMPOTENCY_KEY_HEADER: key}
        # A POST is safe to repeat only where the server deduplicates it by its key.
        idempotent = method == "GET" or (self._idempotent_posts and key is not None)
        attempt = 0
        while True:
            attempt += 1
            request = self._http.build_request(method, path, **kwargs)
            try:
                response = self._http.send(request, stream=stream)
                if to_store and response.status_code == 307 and "location" in response.headers:
                    response = self._from_store(response, stream=stream)
            except httpx.TransportError as err:
                if attempt < self._retry.attempts and should_retry(idempotent=idempotent,
                                                                   error=err):
                    self._pause(attempt, None, f"{method} {path}: {_describe(err)}")
                    continue
                raise ConnectionFailedError(
                    f"could not reach FuseForge at {self.base_url} ({method} {path}: "
                    f"{_describe(err)}, after {attempt} tries); check the URL (FUSEFORGE_URL) "
                    "and that the server is running", error="ConnectionFailed") from err
            if response.is_success:
                return response
            retry_after_s = retry_after_seconds(response.headers.get("Retry-After"))
            if (attempt < self._retry.attempts
                    and should_retry(idempotent=idempotent, status_code=response.status_code,
                                     retry_after_s=retry_after_s)
                    and (retry_after_s or 0) <= self._retry.max_retry_after_s):
                response.close()
                self._pause(attempt, retry_after_s, f"{method} {path}: {response.status_code}")
                continue
            raise _error_from(response, method, path, idempotency_key=key, tries=attempt)

    def _from_store(self, redirect: httpx.Response, *, stream: bool) -> httpx.Response:
        location = redirect.headers["location"]
        redirect.close()
        return self._store_http.send(self._store_http.build_request("GET", location),
                                     stream=stream)

    def _pause(self, attempt: int, retry_after_s: float | None, why: str) -> None:
        delay = self._retry.delay_s(attempt, retry_after_s)
        logger.info("%s; retrying in %.2f s (try %d of %d)", why, delay, attempt + 1,
                    self._retry.attempts)
        self._sleep(delay)


def _describe(err: httpx.TransportError) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _error_from(response: httpx.Response, method: str, path: str, *,
                idempotency_key: str | None, tries: int) -> Exception:
    response.read()
    response.close()
    error: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        error = str(body["error"]) if body.get("error") is not None else None
        detail = str(body["detail"])
    else:
        text = " ".join(response.text.split())[:_DETAIL_CHARS]
        detail = text or f"the server answered {response.status_code} with no body"
    if idempotency_key is not None and error in IDEMPOTENCY_CONFLICTS:
        return IdempotencyConflictError(
            f"{detail} ({_IDEMPOTENCY_ADVICE[error]}; {tries} tries with Idempotency-Key "
            f"{idempotency_key})", error=error, status_code=response.status_code,
            method=method, path=path, idempotency_key=idempotency_key)
    return api_error(response.status_code, error or f"HTTP{response.status_code}", detail,
                     method=method, path=path)


# What a caller should make of each conflict on a request's Idempotency-Key.
_IDEMPOTENCY_ADVICE = {
    "IdempotencyKeyInProgress": "the server is still working on an earlier try of this very "
                                "request, which may yet succeed: look for its result (e.g. "
                                "GET /v1/jobs) before sending it again",
    "IdempotencyKeyReused": "the request changed between tries (e.g. the file was rewritten "
                            "during the upload); send it again as a new call",
}
