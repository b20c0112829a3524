"""Conditions shared by fusion rules; each returns a failed MatchResult that says why, or None."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult

__all__ = [
    "attr_int",
    "const_array",
    "refuse_if_not_constant",
    "refuse_if_shared",
    "refuse_if_escapes",
    "unique_initializer_name",
]


def refuse_if_not_constant(*values: ir.Value | None) -> MatchResult | None:
    """Parameters must be constants baked into the model, never graph inputs a caller can feed."""
    for value in values:
        if value is None:
            continue
        if value.const_value is None:
            return MatchResult().fail(f"'{value.name}' is not a constant")
        if value.is_graph_input():
            return MatchResult().fail(f"'{value.name}' is also a graph input, so it can change")
    return None


def refuse_if_shared(value: ir.Value, *allowed_users: ir.Node) -> MatchResult | None:
    """Rewriting a weight that other nodes also read would change them too (or double memory)."""
    for user, _ in value.uses():
        if user not in allowed_users:
            return MatchResult().fail(
                f"'{value.name}' is also used by node '{user.name}' ({user.op_type})"
            )
    return None


def refuse_if_escapes(value: ir.Value, consumer: ir.Node) -> MatchResult | None:
    """An intermediate fused away must feed only the next op of the pattern."""
    if value.is_graph_output():
        return MatchResult().fail(f"'{value.name}' is a graph output, so it must stay computed")
    for user, _ in value.uses():
        if user is not consumer:
            return MatchResult().fail(
                f"'{value.name}' is also used by node '{user.name}' ({user.op_type})"
            )
    return None


def const_array(value: ir.Value) -> np.ndarray:
    assert value.const_value is not None  # callers check with refuse_if_not_constant first
    return value.const_value.numpy()


def attr_int(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else attr.as_int()


def unique_initializer_name(graph: ir.Graph | ir.Function | None, base: str) -> str:
    """`base`, or `base_N` if the graph already has an initializer so named."""
    taken = graph.initializers if isinstance(graph, ir.Graph) else {}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name
