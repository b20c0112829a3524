"""Conditions shared by fusion rules; each returns a failed MatchResult that says why, or None.

Also the few readers and writers those conditions and the rules share (constants, attributes,
static shapes, producers, initializer names), so that every rule reads a node the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchContext
from onnxscript.rewriter.pattern import MatchResult

from optimizer.passes.matching import node_label

__all__ = [
    "FLOAT_TYPES",
    "attr_float",
    "attr_int",
    "const_array",
    "first_refusal",
    "perm",
    "producer",
    "refuse_if_escapes",
    "refuse_if_intermediates_escape",
    "refuse_if_not_constant",
    "refuse_if_not_float32",
    "refuse_if_shared",
    "refuse_unknown_attributes",
    "refuse_unless_same_float",
    "shared_constant",
    "static_shape",
    "unique_initializer_name",
]

# A check's outcome, or a function giving it when the check may run only after earlier ones.
_Check = MatchResult | None | Callable[[], MatchResult | None]


def first_refusal(*checks: _Check) -> MatchResult | None:
    """The first failed check, or None when all pass. (A failed MatchResult is falsy, so
    `a or b` would skip it.)

    Pass a check as a function when it may only run once the earlier ones passed, e.g. one that
    reads a weight an earlier check proved constant:

    >>> first_refusal(refuse_if_not_constant(w), lambda: refuse_unless_2d(w))  # doctest: +SKIP
    """
    for check in checks:
        refusal = check() if callable(check) else check
        if refusal is not None:
            return refusal
    return None


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


def refuse_if_escapes(value: ir.Value, *consumers: ir.Node) -> MatchResult | None:
    """An intermediate fused away must feed only the next ops of the pattern, `consumers`."""
    if value.is_graph_output():
        return MatchResult().fail(f"'{value.name}' is a graph output, so it must stay computed")
    return refuse_if_shared(value, *consumers)


def refuse_if_intermediates_escape(context: MatchContext) -> MatchResult | None:
    """Every value a match computes, other than those it replaces, must feed only the match.

    Rules that keep matched nodes in place (remove_nodes=False, as FormsRule does) use this so
    that this check, and not the rewriter's silent pre-check, decides, and the refusal is
    reported with a reason.
    """
    matched = set(context.nodes)
    replaced = set(context.output_values)
    for node in context.nodes:
        for value in node.outputs:
            if value in replaced:
                continue
            if value.is_graph_output():
                return MatchResult().fail(
                    f"'{value.name}' ({node.op_type} output) is a graph output, so it must stay "
                    "computed"
                )
            for user, _ in value.uses():
                if user not in matched:
                    return MatchResult().fail(
                        f"'{value.name}' ({node.op_type} output) is also used by "
                        f"{node_label(user)}"
                    )
    return None


def refuse_if_not_float32(node: ir.Node, kernel: str) -> MatchResult | None:
    """`node`'s output must be float32, the one type onnxruntime's CPU `kernel` is registered for.

    Ops such as Conv give their output their input's element type, so an output not yet typed
    by shape inference is judged by the first input.
    """
    out, x = node.outputs[0], node.inputs[0]
    dtype = out.dtype or (x.dtype if x is not None else None)
    if dtype == ir.DataType.FLOAT:
        return None
    if dtype is None:
        return MatchResult().fail(f"'{out.name}' has no known element type")
    return MatchResult().fail(
        f"'{out.name}' is {dtype.name}; onnxruntime's CPU {kernel} kernel is float32 only"
    )


def refuse_unknown_attributes(node: ir.Node, known: tuple[str, ...] = ()) -> MatchResult | None:
    """Every attribute must be one the rule translates (`known`), with a value, not a reference
    to a function's attribute."""
    for name, attr in node.attributes.items():
        if name not in known:
            return MatchResult().fail(f"{node.op_type} '{node.name}' has unknown attribute '{name}'")
        if attr.is_ref():
            return MatchResult().fail(
                f"{node.op_type} '{node.name}' takes '{name}' from a function attribute")
    return None


def const_array(value: ir.Value) -> np.ndarray:
    assert value.const_value is not None  # callers check with refuse_if_not_constant first
    return value.const_value.numpy()


def attr_int(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else attr.as_int()


def attr_float(node: ir.Node, name: str, default: float) -> float:
    attr = node.attributes.get(name)
    return default if attr is None else attr.as_float()


def perm(node: ir.Node, rank: int | None = None) -> tuple[int, ...] | None:
    """A Transpose's perm; without the attribute the spec's default (the axes reversed) when
    `rank` is known, else None."""
    attr = node.attributes.get("perm")
    if attr is not None:
        return tuple(attr.as_ints())
    return None if rank is None else tuple(reversed(range(rank)))


def producer(value: ir.Value) -> ir.Node:
    """The node computing `value`, which the pattern bound to a node output."""
    node = value.producer()
    assert node is not None  # a pattern binds intermediates to node outputs only
    return node


def static_shape(value: ir.Value) -> tuple[int, ...] | None:
    """`value`'s shape when every dim is known, else None."""
    if value.shape is None or not all(isinstance(d, int) for d in value.shape.dims):
        return None
    return tuple(int(d) for d in value.shape.dims)  # type: ignore[arg-type]


def unique_initializer_name(graph: ir.Graph | ir.Function | None, base: str) -> str:
    """`base`, or `base_N` if the graph already has an initializer so named."""
    taken = graph.initializers if isinstance(graph, ir.Graph) else {}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def shared_constant(op: Any, graph: ir.Graph | None, base: str, array: np.ndarray) -> ir.Value:
    """A constant holding `array`, reusing one an earlier rewrite made under the name `base` (a
    causal mask or a zero bias is often shared by every layer: one copy each would multiply its
    memory)."""
    if graph is not None:
        existing = graph.initializers.get(base)
        if (existing is not None and existing.const_value is not None
                and existing.const_value.dtype == ir.DataType.from_numpy(array.dtype)
                and np.array_equal(existing.const_value.numpy(), array)):
            return existing
    name = unique_initializer_name(graph, base)
    return op.initializer(ir.tensor(np.ascontiguousarray(array), name=name))


FLOAT_TYPES = (ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE)


def refuse_unless_same_float(*values: ir.Value) -> MatchResult | None:
    """Every value must have the same floating-point type (no silent mixed precision)."""
    dtypes = {value.dtype for value in values}
    if len(dtypes) != 1 or next(iter(dtypes)) not in FLOAT_TYPES:
        found = ", ".join(f"'{v.name}': {v.dtype}" for v in values)
        return MatchResult().fail(f"types must be one of float16/float/double and equal; {found}")
    return None
