"""Prove dynamic dims equal by tracing where each one comes from, for rules on dynamic models.

ONNX shape inference names an unknown dim afresh (unk__7) wherever it cannot follow it, e.g.
after a Reshape whose target is read from Shape(x), or a broadcast Add of two dims it does not
know are equal, so two dims that are always equal can carry different names. `DimTracer` walks
a graph once, in order, and gives each dim of each value a key; equal keys are proven equal:
- an int is a static dim; ("sym", name) a named dim. Names are what shape inference or the model
  declares: ONNX gives one dim_param the same value wherever it appears in a model, and
  inference only reuses a name it carried forward (so input_ids' and attention_mask's "batch"
  are the same, as the profiled model declares them);
- ("le", k): a dim known to be at most k (Slice(data, 0, end=k) on a static axis of at least 1);
- an unknown dim gets a key equal to nothing else.
Keys follow through the ops that provably keep a dim: elementwise ops and broadcasting (where
every other operand's dim is 1, the same key, or at most that key, which a valid broadcast only
allows when it is equal or 1), MatMul, Transpose, Gather, ReduceX with keepdims, Slice, Reshape
(copies via 0, a Shape read or a -1 that cancels), Shape/Gather/Slice/Concat/Unsqueeze on shapes, and
the fused nodes (SkipLayerNorm, BiasGelu, MultiHeadAttention) rules leave behind.

Not proven (left as the inferred name, or unknown): anything computed from a shape's values
(Add, Mul on shapes), dims behind control flow, and zero-size dims (a 0 read from a shape and
used as a Reshape target copies instead of giving 0; no model here reshapes to empty tensors).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from optimizer.passes.checks import attr_int
from optimizer.plugins.base import DOMAIN as PLUGIN_DOMAIN

__all__ = ["Dim", "DimTracer", "ShapeProofError", "describe_dims", "reshape_dims"]


class _Unknown:
    """A dim nothing is known about: equal only to itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "?"


Dim = int | tuple[Any, ...] | _Unknown


class ShapeProofError(Exception):
    """Raised when a Reshape target cannot be resolved; the message says why."""


_SAME_SHAPE = frozenset({
    "Identity", "Cast", "Relu", "Erf", "Sqrt", "Tanh", "Sigmoid", "Neg", "Exp", "Log", "Abs",
    "Softmax", "LayerNormalization", "Dropout", "Gelu", "FastGelu", "Reciprocal",
})
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "BiasGelu", "SkipLayerNorm",
                        "SkipLayerNormalization", "Max", "Min", "Sum", "Where"})
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2"})
_ATTENTION = frozenset({"MultiHeadAttention"})
# ONNX, onnxruntime's contrib ops and our plugins': ops elsewhere may share a name but not its
# shape rules, so their outputs are not traced.
_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft", PLUGIN_DOMAIN})


def describe_dims(dims: Sequence[Dim] | None) -> str:
    """How a refusal prints traced dims: [batch, ≤seq, 256, ?]."""
    if dims is None:
        return "unknown"

    def one(dim: Dim) -> str:
        if isinstance(dim, tuple) and dim[0] == "sym":
            return str(dim[1])
        if isinstance(dim, tuple) and dim[0] == "le":
            return f"≤{one(dim[1])}"
        return repr(dim)

    return "[" + ", ".join(one(d) for d in dims) + "]"


def _from_shape(value: ir.Value) -> tuple[Dim, ...] | None:
    if value.shape is None:
        return None
    dims: list[Dim] = []
    for dim in value.shape.dims:
        if isinstance(dim, int):
            dims.append(dim)
        elif dim.value is not None:
            dims.append(("sym", dim.value))
        else:
            dims.append(_Unknown())
    return tuple(dims)


def _broadcast(operands: Sequence[Sequence[Dim]]) -> tuple[Dim, ...]:
    rank = max(len(o) for o in operands)
    result: list[Dim] = []
    for axis in range(rank):
        found = [o[axis - rank + len(o)] for o in operands if axis - rank + len(o) >= 0]
        candidates = [d for d in found if d != 1]
        exact = [d for d in candidates if not (isinstance(d, tuple) and d[0] == "le")]
        if not candidates:
            result.append(1)
        elif exact and all(d == exact[0] or d == ("le", exact[0]) for d in candidates):
            result.append(exact[0])  # a valid broadcast allows only equal dims or 1s
        else:
            result.append(_Unknown())
    return tuple(result)


def reshape_dims(node: ir.Node, in_dims: Sequence[Dim], target: Sequence[Dim] | None) -> tuple[
        Dim, ...]:
    """The output dims of Reshape `node` with input dims `in_dims` and target values `target`
    (ints, possibly 0 and -1, or keys read from shapes).

    Raises:
        ShapeProofError: the target is unknown, has two -1s, a 0 past the input rank, or a -1
            that does not cancel against the input dims.
    """
    if target is None:
        raise ShapeProofError(
            f"Reshape '{node.name}' shape '{node.inputs[1].name if node.inputs[1] else None}' is "
            "neither a constant nor read from tensor shapes (Shape/Gather/Concat)")
    dims = list(target)
    if not attr_int(node, "allowzero", 0):
        for i, dim in enumerate(dims):
            if dim == 0:
                if i >= len(in_dims):
                    raise ShapeProofError(f"Reshape '{node.name}' copies dim {i} (0) of an input "
                                          f"of rank {len(in_dims)}")
                dims[i] = in_dims[i]  # 0 copies the input dim unless allowzero is set
    if dims.count(-1) > 1:
        raise ShapeProofError(f"Reshape '{node.name}' has target {describe_dims(dims)} with two -1")
    if -1 in dims:
        others = [d for d in dims if d != -1]
        remaining = Counter(d for d in in_dims if not isinstance(d, int))
        for dim in others:
            if isinstance(dim, int):
                continue
            if remaining[dim] == 0:
                raise ShapeProofError(
                    f"Reshape '{node.name}' target {describe_dims(target)} on input "
                    f"{describe_dims(in_dims)}: the -1 needs a static input shape")
            remaining[dim] -= 1
        left = [d for d, count in remaining.items() for _ in range(count)]
        known_in = math.prod(d for d in in_dims if isinstance(d, int))
        known_out = math.prod(d for d in others if isinstance(d, int))
        if not left and known_out > 0 and known_in % known_out == 0:
            dims[dims.index(-1)] = known_in // known_out
        elif len(left) == 1 and known_in == known_out and known_in > 0:
            dims[dims.index(-1)] = left[0]
        else:
            raise ShapeProofError(
                f"Reshape '{node.name}' target {describe_dims(target)} on input "
                f"{describe_dims(in_dims)}: the -1 needs a static input shape")
    return tuple(dims)


class DimTracer:
    """Keys for the dims of a graph's values (see the module docstring).

    The graph is walked once, and only when a question needs it: a value whose inferred shape
    is fully static, or a constant's contents, is answered from itself, so rules matching a
    static model (every ONNX Runtime job) never pay for the walk.
    """

    def __init__(self, graph: ir.Graph | None) -> None:
        self._graph = graph
        self._traced = graph is None
        self._dims: dict[ir.Value, tuple[Dim, ...]] = {}
        self._contents: dict[ir.Value, tuple[Dim, ...]] = {}  # of 1-D or scalar int tensors

    def _trace(self) -> None:
        if self._traced:
            return
        self._traced = True  # set first: _visit asks dims() and contents() of earlier values
        assert self._graph is not None
        for node in self._graph:
            try:
                self._visit(node)
            except (ValueError, TypeError, IndexError, ShapeProofError):
                continue  # not provable: its outputs fall back to their inferred names

    def dims(self, value: ir.Value | None) -> tuple[Dim, ...] | None:
        """The keys of `value`'s dims; None when its rank is unknown."""
        if value is None:
            return None
        inferred = _from_shape(value)
        if inferred is not None and all(isinstance(dim, int) for dim in inferred):
            return inferred  # static dims are their own keys
        self._trace()
        return self._dims.get(value) or inferred

    def contents(self, value: ir.Value | None) -> tuple[Dim, ...] | None:
        """The values of a 1-D (or scalar) int64 shape tensor, as dims; None if not known.

        A constant that is also a graph input is not known: a caller can feed another value.
        """
        if value is None:
            return None
        if value.const_value is not None and not value.is_graph_input():
            array = value.const_value.numpy()
            if array.dtype.kind == "i" and array.ndim <= 1:
                return tuple(int(x) for x in array.reshape(-1))
            return None
        self._trace()
        return self._contents.get(value)

    def _visit(self, node: ir.Node) -> None:
        if node.domain not in _DOMAINS:
            return
        inputs = [self.dims(v) for v in node.inputs]
        op = node.op_type
        out: tuple[Dim, ...] | None = None
        if op in _SAME_SHAPE and inputs and inputs[0] is not None:
            out = inputs[0]
        elif op in _BROADCAST:
            operands = [self.dims(v) for v in node.inputs if v is not None]  # skip absent ones
            if operands and all(d is not None for d in operands):
                out = _broadcast([d for d in operands if d is not None])
        elif op in _REDUCE and attr_int(node, "keepdims", 1) and inputs[0] is not None:
            out = self._reduce(node, inputs[0])
        elif op == "MatMul" and inputs[0] is not None and inputs[1] is not None:
            a, b = inputs[0], inputs[1]
            if len(a) >= 2 and len(b) >= 2:
                batch = _broadcast([a[:-2], b[:-2]]) if max(len(a), len(b)) > 2 else ()
                out = (*batch, a[-2], b[-1])
        elif op == "Transpose" and inputs[0] is not None:
            perm = node.attributes.get("perm")
            order = (list(perm.as_ints()) if perm is not None
                     else list(range(len(inputs[0])))[::-1])
            out = tuple(inputs[0][p] for p in order)
        elif op == "Gather" and inputs[0] is not None and inputs[1] is not None:
            axis = attr_int(node, "axis", 0) % len(inputs[0])
            out = (*inputs[0][:axis], *inputs[1], *inputs[0][axis + 1:])
            self._gather_contents(node)
        elif op == "Reshape" and inputs[0] is not None:
            out = reshape_dims(node, inputs[0], self.contents(node.inputs[1]))
        elif op == "Slice" and inputs[0] is not None:
            out = self._slice(node, inputs[0])
            self._slice_contents(node)
        elif op in _ATTENTION and inputs[0] is not None and len(inputs[0]) == 3:
            value = inputs[2] if len(inputs) > 2 else None
            if value is not None and len(value) == 3:
                out = (inputs[0][0], inputs[0][1], value[2])
        elif op == "Shape" and inputs[0] is not None:
            rank = len(inputs[0])
            start, end = attr_int(node, "start", 0), attr_int(node, "end", rank)
            self._contents[node.outputs[0]] = tuple(inputs[0][slice(start, end)])
        elif op == "Concat":
            parts = [self.contents(v) for v in node.inputs]
            if all(p is not None for p in parts):
                self._contents[node.outputs[0]] = tuple(d for p in parts for d in p or ())
        elif op in ("Unsqueeze", "Squeeze") and node.inputs[0] is not None:
            found = self.contents(node.inputs[0])
            if found is not None and len(found) == 1:
                self._contents[node.outputs[0]] = found
        if out is None:
            return
        # Output 0, and the sum a SkipLayerNorm node may also give (same shape).
        extra = {"SkipLayerNormalization": 3, "SkipLayerNorm": 1}.get(op)
        for index, output in enumerate(node.outputs):
            if index not in (0, extra):
                continue
            inferred = _from_shape(output)
            if inferred is None or len(inferred) == len(out):
                # A static dim from inference is kept; otherwise the traced key.
                self._dims[output] = tuple(s if isinstance(s, int) else d
                                           for s, d in zip(inferred or out, out, strict=True))

    def _gather_contents(self, node: ir.Node) -> None:
        data = self.contents(node.inputs[0])
        indices = self.contents(node.inputs[1])
        if data is None or indices is None or attr_int(node, "axis", 0) != 0:
            return
        if not all(isinstance(i, int) for i in indices):
            return
        self._contents[node.outputs[0]] = tuple(data[int(i)] for i in indices)  # type: ignore

    def _slice_contents(self, node: ir.Node) -> None:
        """Slice(shape, start, end) with step 1 on a shape's values: those values (torch's
        exporter reads [B, N], T and H off Shape(K) this way, with negative starts)."""
        data = self.contents(node.inputs[0])
        given = [*node.inputs[1:5], *[None] * (5 - len(node.inputs))]
        starts, ends, axes, steps = (self.contents(v) for v in given)
        if (data is None or starts is None or ends is None or len(starts) != 1
                or len(ends) != 1 or (given[2] is not None and axes not in ((0,), (-1,)))
                or (given[3] is not None and steps != (1,))):
            return  # an axis or step given but not known, or not 0 and 1
        start, end = starts[0], ends[0]
        if isinstance(start, int) and isinstance(end, int):
            # Python's slice clamps out-of-range and negative bounds as ONNX's Slice does.
            self._contents[node.outputs[0]] = data[start:end]

    def _reduce(self, node: ir.Node, data: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
        """keepdims=1: a reduced axis becomes 1, the others keep the input's dim."""
        attr = node.attributes.get("axes")
        if attr is not None:
            axes: tuple[Dim, ...] | None = tuple(attr.as_ints())
        elif len(node.inputs) > 1 and node.inputs[1] is not None:
            axes = self.contents(node.inputs[1])
        else:
            axes = ()
        if axes is None or not all(isinstance(a, int) for a in axes):
            return None
        if not axes:
            if attr_int(node, "noop_with_empty_axes", 0):
                return data
            axes = tuple(range(len(data)))
        reduced = {a % len(data) for a in axes if isinstance(a, int)}  # all ints, checked
        return tuple(1 if i in reduced else d for i, d in enumerate(data))

    def _slice(self, node: ir.Node, data: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
        """Slice from 0 with step 1 to an end read from a shape: at most that dim."""
        starts, ends = self.contents(node.inputs[1]), self.contents(node.inputs[2])
        axes_value = node.inputs[3] if len(node.inputs) > 3 else None
        steps_value = node.inputs[4] if len(node.inputs) > 4 else None
        axes = self.contents(axes_value)
        steps = self.contents(steps_value)
        if (starts is None or ends is None or (axes_value is not None and axes is None)
                or (steps_value is not None and steps is None)):
            return None  # a start, end, axis or step that is not known
        axes = axes if axes is not None else tuple(range(len(starts)))
        out = list(data)
        for i, axis in enumerate(axes):
            if not isinstance(axis, int) or (steps is not None and steps[i] != 1):
                return None
            axis %= len(data)
            size = data[axis]
            if starts[i] != 0 or not isinstance(size, int) or size < 1:
                out[axis] = _Unknown()
            elif isinstance(ends[i], int):
                end = int(ends[i])  # type: ignore[arg-type]
                out[axis] = min(size, end) if end >= 0 else _Unknown()
            else:
                out[axis] = ("le", ends[i])
        return tuple(out)
