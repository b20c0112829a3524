"""Notes a pass leaves on the model it rewrote, for the fusion report to carry.

A rule's refusal reaches the report through the match tracer; a whole-graph pass has no such
channel, so it states what it did (or why not) here. The notes live in the model's transient
`meta` store, which is never serialized.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["add_note", "pass_notes"]

_KEY = "fuseforge.pass_notes"


def add_note(model: ir.Model, note: str) -> None:
    """Record `note` on `model` once (a pass repeated to a fixed point may say it again)."""
    notes: list[str] = model.meta.setdefault(_KEY, [])
    if note not in notes:
        notes.append(note)


def pass_notes(model: ir.Model) -> tuple[str, ...]:
    """The notes passes left on `model`, in the order they were added."""
    return tuple(model.meta.get(_KEY, ()))
