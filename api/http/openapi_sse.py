"""A Server-Sent Events response as OpenAPI can state it: the schema of one event.

OpenAPI 3.2 calls it `itemSchema`; on 3.0 and 3.1 (FastAPI writes 3.1) a `text/event-stream`
`schema` is read the same way by SSE-aware tools (schemathesis parses the stream and checks
each event against it), so the schema is an event's, not a string's: the `event` name, the
`id` to resume from where one is sent, and `data`, one line of JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["sse_content"]


def sse_content(event_types: Mapping[str, str], example: str) -> dict[str, Any]:
    """The `content` of a 200 that streams events named `event_types` (name: what it carries)."""
    return {"text/event-stream": {"schema": {
        "type": "object",
        "description": "One Server-Sent Event: " + "; ".join(
            f"`{name}`: {meaning}" for name, meaning in event_types.items()),
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string", "enum": list(event_types)},
            "id": {"type": "string", "description": "where to resume from (Last-Event-ID)"},
            "data": {"type": "string", "contentMediaType": "application/json",
                     "description": "the event's JSON object, on one line"},
            "retry": {"type": "integer"},
        },
    }, "example": example}}
