"""Conditions shared by fusion rules; each returns a failed MatchResult that says why, or None.

Also the few readers and writers those conditions and the rules share (constants, attributes,
static shapes, producers, initializer names), so that every rule reads a node the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    "refuse_if_removed_outputs_escape",
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
    """A weight a rewrite folds into a new constant must have no other readers: they would keep
    the original, and the model would hold both copies.

    For a value a rewrite computes differently, use refuse_if_escapes or
    refuse_if_removed_outputs_escape instead.
    """
    for user, _ in value.uses():
        if user not in allowed_users:
            return MatchResult().fail(
                f"'{value.name}' is also used by node '{user.name}' ({user.op_type})"
            )
    return None


def refuse_if_escapes(value: ir.Value, *consumers: ir.Node) -> MatchResult | None:
    """An intermediate fused away must feed only the next ops of the pattern, `consumers`."""
    node = value.producer()
    return _refuse_if_read_outside(value, node.op_type if node is not None else "input",
                                   set(consumers))


def refuse_if_removed_outputs_escape(
    removed: Iterable[ir.Node], *, may_stay: Iterable[ir.Node] = (),
    replaced: Iterable[ir.Value] = (),
) -> MatchResult | None:
    """The nodes a rewrite fuses away must compute nothing read outside the match.

    `removed`: the nodes the fused op replaces. Their outputs, other than `replaced` (whose
    readers the rewrite moves to the fused op), are intermediates: one that is a graph output,
    or read by a node that outlives the rewrite, would keep its producer (and what feeds it)
    computed next to the fused op.

    Values the rewrite leaves in place are no intermediates and may have any readers: the
    match's inputs, constants, and the outputs of `may_stay` nodes: shape arithmetic such as the
    Shape/Gather/Concat computing a Reshape's target, which torch's dynamo exporter shares
    between the Q, K and V head splits and every other view to the same dims. Such a node dies
    with the match when only the match reads it, else it stays and computes what it did. (A
    `may_stay` node that stays while reading a removed node's output keeps that node alive, so
    it is refused like any other outside reader.)
    """
    removed = list(dict.fromkeys(removed))
    skip = set(replaced)
    dying = set(removed) | set(may_stay)
    # The may_stay nodes that die: those read by none but dying nodes (a fixed point, since
    # one staying keeps the shape nodes it reads).
    changed = True
    while changed:
        changed = False
        for node in list(dying.difference(removed)):
            if any(value.is_graph_output() or any(user not in dying for user, _ in value.uses())
                   for value in node.outputs):
                dying.discard(node)
                changed = True
    for node in removed:
        for value in node.outputs:
            if value not in skip:
                refusal = _refuse_if_read_outside(value, node.op_type, dying)
                if refusal is not None:
                    return refusal
    return None


def refuse_if_intermediates_escape(context: MatchContext) -> MatchResult | None:
    """Every value a match computes, other than those it replaces, must feed only the match.

    Rules that keep matched nodes in place (remove_nodes=False, as FormsRule does) use this so
    that this check, and not the rewriter's silent pre-check, decides, and the refusal is
    reported with a reason. (Their patterns bind constants and shape tensors as variables, not
    nodes, so every matched node is one the rewrite removes.)
    """
    return refuse_if_removed_outputs_escape(context.nodes, replaced=context.output_values)


def _refuse_if_read_outside(value: ir.Value, producer_op: str,
                            inside: set[ir.Node]) -> MatchResult | None:
    if value.is_graph_output():
        return MatchResult().fail(
            f"'{value.name}' ({producer_op} output) is a graph output, so it must stay computed")
    for user, _ in value.uses():
        if user not in inside:
            return MatchResult().fail(
                f"'{value.name}' ({producer_op} output) is also used by {node_label(user)}")
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


def const_shape(value: ir.Value) -> tuple[int, ...]:
    """`const_array(value).shape`, read without the data: a tensor parsed from the file hands
    out a fresh copy of its bytes on each `numpy()` (a ResNet-50's weights: 98 MB a read)."""
    assert value.const_value is not None  # callers check with refuse_if_not_constant first
    return tuple(value.const_value.shape.numpy())


def const_dtype(value: ir.Value) -> np.dtype[Any]:
    """`const_array(value).dtype`, read without the data (see const_shape)."""
    assert value.const_value is not None  # callers check with refuse_if_not_constant first
    return value.const_value.dtype.numpy()


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


def known_shape(value: ir.Value) -> tuple[int, ...] | None:
    """`value`'s static shape, or, where shape inference left it unknown (past an op it does
    not know, such as com.microsoft's), the constant target of the Reshape computing it when
    every dim of that target is given (no 0 or -1)."""
    shape = static_shape(value)
    node = value.producer()
    if shape is not None or node is None or node.op_type != "Reshape" or len(node.inputs) < 2:
        return shape
    target = node.inputs[1]
    if target is None or target.const_value is None:
        return None
    dims = tuple(int(d) for d in target.const_value.numpy().reshape(-1))
    return dims if all(d > 0 for d in dims) else None


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
