"""What every polled Server-Sent Events stream of the API shares: the frame, the timing, and the
pacing after each poll (its frames, a keep-alive after a silence, the timeout frame at the end).

The streams (job_event_stream, job_list_stream) differ in what they read and send; how a
poll's frames go out is this module's `StreamPacing`, written once.
"""

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.settings import HttpSettings

__all__ = ["KEEP_ALIVE", "StreamPacing", "StreamTiming", "sse_frame"]

KEEP_ALIVE = b": keep-alive\n\n"


@dataclass(frozen=True)
class StreamTiming:
    poll_s: float
    heartbeat_s: float
    max_s: float

    @classmethod
    def of(cls, http: HttpSettings) -> "StreamTiming":
        return cls(poll_s=http.events_poll_s, heartbeat_s=http.events_heartbeat_s,
                   max_s=http.events_max_s)


def sse_frame(event: str, data: dict[str, Any], *, event_id: int | str | None = None) -> bytes:
    """One Server-Sent Event; the JSON is on one line (json escapes newlines in strings), and so
    must `event_id` be."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


@dataclass
class StreamPacing:
    """One stream's clock: when it started and when it last sent something."""

    timing: StreamTiming
    started: float = field(default_factory=time.monotonic)
    last_sent: float = field(default_factory=time.monotonic)

    def sent(self) -> None:
        """Something went out outside `after_poll` (a stream's first chunk)."""
        self.last_sent = time.monotonic()

    def after_poll(self, frames: Sequence[bytes], timeout_frame: Callable[[], bytes]
                   ) -> tuple[list[bytes], bool]:
        """The chunks to send after a poll, and whether the stream ends with them: the poll's
        frames as one chunk, else a keep-alive once `heartbeat_s` passed in silence; then,
        once the stream is `max_s` old, `timeout_frame()` (which tells the client where to
        resume), and the stream ends."""
        now = time.monotonic()
        chunks = []
        if frames:
            chunks.append(b"".join(frames))
            self.last_sent = now
        elif now - self.last_sent >= self.timing.heartbeat_s:
            chunks.append(KEEP_ALIVE)
            self.last_sent = now
        if now - self.started >= self.timing.max_s:
            return [*chunks, timeout_frame()], True
        return chunks, False
