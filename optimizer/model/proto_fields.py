"""Copy a protobuf message but some of its fields, without copying those fields' values (a
tensor's bytes, a graph's initializers): what the model writers send on separately."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

__all__ = ["without_fields"]

_M = TypeVar("_M", bound=Message)


def without_fields(message: _M, *left_out: str) -> _M:
    """A copy of `message` without its fields `left_out` (the other fields copied, not them)."""
    copy: _M = type(message)()
    for field, value in message.ListFields():
        if field.name in left_out:
            continue
        if field.is_repeated:
            getattr(copy, field.name).extend(value)
        elif field.message_type is not None:
            getattr(copy, field.name).CopyFrom(value)
        else:
            setattr(copy, field.name, value)
    return copy
