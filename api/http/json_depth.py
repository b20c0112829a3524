"""Where a JSON body nests too deep, found without a recursive parser.

Python's json module recurses once per level, so a body nested thousands deep stops it with a
RecursionError that says nothing of where. The body is still well-formed JSON with an invalid
value, so its answer is a 422 naming that value's field: this scanner walks the text once,
with a stack instead of recursion, and returns the path of the first container that opens
deeper than the limit.
"""

from __future__ import annotations

__all__ = ["MAX_JSON_DEPTH", "too_deep_path"]

MAX_JSON_DEPTH = 64  # a job body nests 4 levels; no real value needs more than a few


def too_deep_path(body: bytes, limit: int = MAX_JSON_DEPTH) -> list[str | int] | None:
    """The path (keys and list indices) to the first container nested deeper than `limit`;
    None where none is (or the text is not JSON the scan can follow)."""
    text = body.decode("utf-8", "replace")
    path: list[str | int] = []  # the key or index of each open container's current value
    kinds: list[str] = []  # "{" or "[" per open container
    key: str | None = None  # the last string read inside an object, awaiting ":"
    at = 0
    while at < len(text):
        char = text[at]
        if char == '"':
            end = _string_end(text, at)
            if end < 0:
                return None
            if kinds and kinds[-1] == "{":
                key = text[at + 1:end]
            at = end + 1
            continue
        if char == ":" and kinds and kinds[-1] == "{" and key is not None:
            path[-1] = key
        elif char == "," and kinds and kinds[-1] == "[":
            path[-1] = int(path[-1]) + 1
        elif char in "{[":
            if len(kinds) >= limit:
                return path
            kinds.append(char)
            path.append(0 if char == "[" else "")
        elif char in "}]":
            if not kinds:
                return None
            kinds.pop()
            path.pop()
        at += 1
    return None


def _string_end(text: str, start: int) -> int:
    """The index of the quote closing the string that opens at `start`; -1 if none does."""
    at = start + 1
    while at < len(text):
        if text[at] == "\\":
            at += 2
            continue
        if text[at] == '"':
            return at
        at += 1
    return -1
