"""ASGI middleware that answers 408 to a request body that stalls or trickles (slowloris).

Neither uvicorn nor Starlette times out a request body: a client that sends its headers and
then a byte a second holds a connection, and a worker's upload slot, for as long as it likes.
Each wait for the next piece of the body is bounded by the idle timeout and by a deadline that
grows with the bytes received (mod_reqtimeout's model: `idle_timeout_s` of grace, then
`min_rate_bytes_s` on average). When either passes, the app's `receive` raises
RequestBodyTimeout, which the app renders as 408 with `Connection: close`; the upload reader
deletes what it had written, as on any error.
"""

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.services.errors import RequestBodyTimeout

__all__ = ["BodyDeadline"]


class BodyDeadline:
    """Wraps `receive` for HTTP requests until the body is complete; other messages pass."""

    def __init__(self, app: ASGIApp, *, idle_timeout_s: float, min_rate_bytes_s: int) -> None:
        self.app = app
        self.idle_timeout_s = idle_timeout_s
        self.min_rate_bytes_s = min_rate_bytes_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, _TimedBody(receive, self.idle_timeout_s, self.min_rate_bytes_s),
                       send)


class _TimedBody:
    """One request's `receive`, bounded while the body is still arriving."""

    def __init__(self, receive: Receive, idle_timeout_s: float, min_rate_bytes_s: int) -> None:
        self.receive = receive
        self.idle_timeout_s = idle_timeout_s
        self.min_rate_bytes_s = min_rate_bytes_s
        self.started = asyncio.get_running_loop().time()
        self.received = 0
        self.complete = False

    async def __call__(self) -> Message:
        if self.complete:  # after the body: waiting for a disconnect is not bounded
            return await self.receive()
        wait, reason = self._next_wait()
        try:
            message = await asyncio.wait_for(self.receive(), max(wait, 0.0))
        except TimeoutError as err:
            raise RequestBodyTimeout(reason) from err
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.complete = not message.get("more_body", False)
        else:
            self.complete = True
        return message

    def _next_wait(self) -> tuple[float, str]:
        """Seconds the next piece may take, and what to say if it takes longer."""
        idle = (self.idle_timeout_s,
                f"the request body stalled: no bytes for {self.idle_timeout_s:g} s after "
                f"{self.received} bytes (FUSEFORGE_HTTP__BODY_IDLE_TIMEOUT_S); send the body "
                "without pauses")
        if not self.min_rate_bytes_s:
            return idle
        now = asyncio.get_running_loop().time()
        deadline = self.started + self.idle_timeout_s + self.received / self.min_rate_bytes_s
        if deadline - now >= self.idle_timeout_s:
            return idle
        return (deadline - now,
                f"the request body arrived too slowly: {self.received} bytes in "
                f"{deadline - self.started:.1f} s, under the minimum rate of "
                f"{self.min_rate_bytes_s} bytes/s (FUSEFORGE_HTTP__BODY_MIN_RATE_BYTES_S) after "
                f"{self.idle_timeout_s:g} s of grace; send the body faster")
