"""ASGI middleware giving each request an id: every line logged while it is handled carries it
(core/logging_setup.py), and the response says it in `X-Request-ID`.

An incoming `X-Request-ID` (from a proxy or a client that logs its own) is kept when it is a
sane token: 1-128 characters of letters, digits and `._:-`. Anything else (too long, spaces,
control characters a log injection would use) is replaced by a fresh id.
"""

import os
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.logging_setup import request_id_var

__all__ = ["REQUEST_ID_HEADER", "RequestIds", "sane_request_id"]

REQUEST_ID_HEADER = "X-Request-ID"
_HEADER_KEY = b"x-request-id"
_SANE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def sane_request_id(raw: bytes | None) -> str:
    """`raw` if it is a sane token, else a new id (32 random hex digits)."""
    if raw is not None and _SANE.fullmatch(raw):
        return raw.decode("ascii")
    return os.urandom(16).hex()  # as unique as a uuid4, at a quarter of its cost


class RequestIds:
    """Sets the request id for the request's context and echoes it in the response headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((value for key, value in scope["headers"] if key == _HEADER_KEY), None)
        request_id = sane_request_id(incoming)
        # Not reset afterwards: each request runs in a task of its own (a copy of the context),
        # and the 500 handler, which Starlette runs outside this middleware, still reads it.
        request_id_var.set(request_id)
        header = (_HEADER_KEY, request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)
