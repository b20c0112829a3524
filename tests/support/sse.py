"""A Server-Sent Events parser for tests, after the HTML standard's rules ("Interpreting an event
stream"): lines end in LF, CRLF or CR; a blank line dispatches the event; `:` starts a comment;
`data` lines join with LF; a field's single leading space after the colon is dropped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ServerSentEvent", "parse_sse"]


@dataclass(frozen=True)
class ServerSentEvent:
    event: str  # "message" when the stream names none
    data: str
    id: str | None = None  # the id field of this event itself, if it had one
    comments: list[str] = field(default_factory=list)  # comment lines since the last event

    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse(chunks: Iterable[bytes | str]) -> Iterator[ServerSentEvent]:
    """The events of a stream given as chunks cut anywhere (a comment-only block yields an
    event named "" with the comments, so tests can see heartbeats). An unfinished last event
    (no blank line after it) is dropped, as a browser would."""
    buffer = ""
    event_id: str | None = None
    event, data, comments = "", [], []
    for chunk in chunks:
        buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        held = "\r" if buffer.endswith("\r") else ""  # its LF may open the next chunk
        text = buffer.removesuffix(held).replace("\r\n", "\n").replace("\r", "\n")
        *lines, rest = text.split("\n")
        buffer = rest + held
        for line in lines:
            if line == "":
                if data:
                    yield ServerSentEvent(event or "message", "\n".join(data), event_id, comments)
                elif comments:
                    yield ServerSentEvent("", "", None, comments)
                event_id, event, data, comments = None, "", [], []
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                comments.append(value)
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id" and "\0" not in value:
                event_id = value
