"""Parse scaled dot-product attention, from the head split to the head merge, for one fused op.

Two rules write one attention op from the subgraph this parser reads:
fuse_attention.FuseMultiHeadAttention (com.microsoft.MultiHeadAttention, for ONNX Runtime) and
its subclass fuse_to_plugins.PluginMultiHeadAttention (fuseforge.MultiHeadAttention, for
TensorRT). fuse_attention's docstring lists the forms accepted, the algebra that makes the
fusion exact and the conditions checked here; each refusal names the node and the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult

from optimizer.passes.checks import attr_int, perm, refuse_if_removed_outputs_escape
from optimizer.passes.matching import ONNX_DOMAINS
from optimizer.passes.symbolic_dims import (
    Dim,
    DimTracer,
    ShapeProofError,
    describe_dims,
    reshape_dims,
)

__all__ = ["Attention", "Heads", "is_static", "parse_attention"]

_SPLIT_PERM = (0, 2, 1, 3)  # [B, S, N, H] → [B, N, S, H], and back for the merge
_SUPPORTED_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)  # the op's CPU kernels


class _Refused(Exception):
    """Raised while parsing the subgraph; the message is the refusal reason."""


@dataclass(frozen=True)
class Heads:
    """One of Q, K, V: its source before the head split and the [B, S, N, H] it was split to."""

    source: ir.Value
    shape: tuple[Dim, Dim, int, int]  # B and S may be dynamic (traced keys), N and H are not
    source_dims: tuple[Dim, ...]

    @property
    def merged_shape(self) -> tuple[Dim, Dim, int]:
        batch, seq, heads, head_size = self.shape
        return batch, seq, heads * head_size


@dataclass(frozen=True)
class Attention:
    """A parsed attention: Q, K, V, the product of its scales, the mask (with the dims traced
    for it) and the shape the head merge gives the output."""

    query: Heads
    key: Heads
    value: Heads
    scale: float
    mask: ir.Value | None
    mask_dims: tuple[Dim, ...] | None
    out_shape: tuple[Dim, ...]
    out_target: ir.Value | None = None  # a constant target to reshape the fused output with
    nan_guard: ir.Value | None = None  # the zero SDPA's guard writes for NaN weights, if guarded


def _produced_by(value: ir.Value | None, op_type: str, what: str) -> ir.Node:
    node = None if value is None else value.producer()
    if node is None or node.op_type != op_type or node.domain not in ONNX_DOMAINS:
        found = "a graph input or constant" if node is None else f"{node.op_type} '{node.name}'"
        name = None if value is None else value.name
        raise _Refused(f"{what} '{name}' comes from {found}, not {op_type}")
    return node


def _constant(value: ir.Value | None, what: str) -> np.ndarray:
    if value is None or value.const_value is None:
        raise _Refused(f"{what} '{value.name if value else None}' is not a constant")
    if value.is_graph_input():
        raise _Refused(f"{what} '{value.name}' is also a graph input, so it can change")
    return value.const_value.numpy()


def _reshaped(node: ir.Node, in_shape: tuple[Dim, ...] | None,
              tracer: DimTracer) -> tuple[Dim, ...]:
    """The output dims of Reshape `node` (0 and -1 resolved), from a constant target or one
    read from shapes (Shape/Gather/Concat); dynamic dims come out as traced keys."""
    target = tracer.contents(node.inputs[1])
    if target is None:
        _constant(node.inputs[1], "Reshape shape")  # raises with the reason
        raise _Refused(f"Reshape '{node.name}' shape is not a 1-D int64 constant")
    if in_shape is None:
        in_shape = tracer.dims(node.inputs[0])
    try:
        dims = reshape_dims(node, in_shape if in_shape is not None else (), target)
    except ShapeProofError as error:
        raise _Refused(str(error)) from error
    if any(isinstance(d, int) and d <= 0 for d in dims) or (in_shape is None and target != dims):
        raise _Refused(f"Reshape '{node.name}' has target {describe_dims(dims)} that needs a "
                       f"static input shape")
    return dims


def _split_heads(value: ir.Value, axes: tuple[int, ...], what: str,
                 tracer: DimTracer) -> tuple[Heads, list[ir.Node]]:
    """`value` = Transpose(Reshape(source, [B, S, N, H]), axes)."""
    transpose = _produced_by(value, "Transpose", what)
    if perm(transpose) != axes:
        raise _Refused(f"{what} Transpose '{transpose.name}' has perm {perm(transpose)}, "
                       f"not {list(axes)}")
    reshape = _produced_by(transpose.inputs[0], "Reshape", f"{what} head split")
    shape = _reshaped(reshape, None, tracer)
    if len(shape) != 4:
        raise _Refused(f"{what} Reshape '{reshape.name}' gives shape {describe_dims(shape)}, "
                       f"not [B, S, N, H]")
    heads, head_size = shape[2], shape[3]
    if not isinstance(heads, int) or not isinstance(head_size, int):
        raise _Refused(f"{what} Reshape '{reshape.name}' gives shape {describe_dims(shape)}: "
                       f"heads and head size must be static")
    source = reshape.inputs[0]
    assert source is not None
    source_dims = tracer.dims(source)
    heads_ = Heads(source, (shape[0], shape[1], heads, head_size),
                    source_dims if source_dims is not None else ())
    if not is_static(heads_.merged_shape) and source_dims != heads_.merged_shape:
        raise _Refused(f"{what} source '{source.name}' has dims {describe_dims(source_dims)}, "
                       f"not the [B, S, N*H] {describe_dims(heads_.merged_shape)} its head "
                       f"split gives (a reshape with dynamic dims is not supported)")
    return heads_, [transpose, reshape]


def is_static(dims: tuple[Dim, ...]) -> bool:
    return all(isinstance(d, int) for d in dims)


def _split_transposed_key(value: ir.Value, tracer: DimTracer) -> tuple[Heads, list[ir.Node]]:
    """Kᵀ [B, N, H, T] in one of the three forms fuse_attention's docstring lists."""
    node = value.producer()
    if node is not None and node.op_type == "Transpose" and perm(node) == (0, 2, 3, 1):
        return _split_heads(value, (0, 2, 3, 1), "key", tracer)
    if node is not None and node.op_type == "Transpose":
        if perm(node) != (0, 1, 3, 2):
            raise _Refused(f"key Transpose '{node.name}' has perm {perm(node)}, not [0, 1, 3, 2]")
        assert node.inputs[0] is not None
        key, nodes = _split_heads(node.inputs[0], _SPLIT_PERM, "key", tracer)
        return key, [node, *nodes]
    # Reshape [B*N, T, H] → Transpose [0, 2, 1] → Reshape [B, N, H, T]
    outer = _produced_by(value, "Reshape", "transposed key")
    transpose = _produced_by(outer.inputs[0], "Transpose", "transposed key")
    inner = _produced_by(transpose.inputs[0], "Reshape", "transposed key")
    assert inner.inputs[0] is not None
    key, nodes = _split_heads(inner.inputs[0], _SPLIT_PERM, "key", tracer)
    batch, seq, heads, head_size = key.shape
    if isinstance(batch, int) and isinstance(seq, int):
        flat = _reshaped(inner, (batch, heads, seq, head_size), tracer)
        flat_ok = flat == (batch * heads, seq, head_size)
        kt_ok = _reshaped(outer, (batch * heads, head_size, seq), tracer) == (
            batch, heads, head_size, seq)
    else:
        # B*N has no traced key; a -1 beside T and H is B*N (H static, T > 0), and the targets
        # must be exactly those, as torch writes them from Shape(K) slices.
        inner_target = tracer.contents(inner.inputs[1])
        if inner_target is None or inner_target != (-1, seq, head_size):
            raise _Refused(f"key Reshape '{inner.name}' flattens batch and heads with target "
                           f"{describe_dims(inner_target)}; with a dynamic batch or sequence only "
                           f"[-1, T, H] = {describe_dims((-1, seq, head_size))} is proven")
        flat_ok = True
        kt_ok = tracer.contents(outer.inputs[1]) == (batch, heads, head_size, seq)
    if not flat_ok or perm(transpose) != (0, 2, 1):
        raise _Refused(f"key Reshape/Transpose '{inner.name}'/'{transpose.name}' is not a "
                       f"transpose of the last two axes")
    if not kt_ok:
        raise _Refused(f"key Reshape '{outer.name}' does not give [B, N, H, T]")
    return key, [outer, transpose, inner, *nodes]


def _peel_scales(value: ir.Value, nodes: list[ir.Node]) -> tuple[ir.Value, float]:
    """Strip Mul/Div by constant scalars above `value`; returns the input and the product."""
    factor = 1.0
    while (node := value.producer()) is not None and node.op_type in ("Mul", "Div"):
        operands = [(0, 1), (1, 0)] if node.op_type == "Mul" else [(0, 1)]
        for keep, scale in operands:  # noqa: B007  (`keep` is read after the break)
            scale_value = node.inputs[scale]
            if scale_value is not None and scale_value.const_value is not None:
                break
        else:
            raise _Refused(f"{node.op_type} '{node.name}' scales by a value that is not a constant")
        array = _constant(scale_value, f"{node.op_type} '{node.name}' scale")
        if array.size != 1 or array.ndim > 4 or array.dtype.kind != "f":
            raise _Refused(f"{node.op_type} '{node.name}' scale '{scale_value.name}' has shape "
                           f"{list(array.shape)} and type {array.dtype}, not one float")
        number = float(array.reshape(()))
        if not math.isfinite(number) or number == 0.0:
            raise _Refused(f"{node.op_type} '{node.name}' scale is {number}")
        factor *= number if node.op_type == "Mul" else 1.0 / number
        nodes.append(node)
        value = node.inputs[keep]  # type: ignore[assignment]
    return value, factor


def _parse_scores(scores: ir.Value, nodes: list[ir.Node]) -> tuple[ir.Node, float, ir.Value | None]:
    """scores = (a·Q) @ (b·Kᵀ) · c [+ mask]: the MatMul, c and the mask."""
    node = scores.producer()
    if node is not None and node.op_type == "Add":
        errors: list[str] = []
        for qk, mask in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            assert qk is not None
            inner: list[ir.Node] = []
            try:
                below, factor = _peel_scales(qk, inner)
                matmul = _produced_by(below, "MatMul", "attention scores")
            except _Refused as refusal:
                producer = qk.producer()
                if producer is not None and producer.op_type in ("Mul", "Div", "MatMul"):
                    errors.insert(0, str(refusal))  # this side looked like the scores
                continue
            nodes += [node, *inner, matmul]
            return matmul, factor, mask
        raise _Refused(errors[0] if errors else
                       f"neither input of Add '{node.name}' is the Q·Kᵀ MatMul")
    below, factor = _peel_scales(scores, nodes)
    add = below.producer()
    if add is not None and add.op_type == "Add" and factor != 1.0:
        raise _Refused(f"the scale is applied after the mask Add '{add.name}', so it would scale "
                       f"the mask too")
    if add is not None and add.op_type == "Where":
        raise _Refused(f"the scores are masked by Where '{add.name}' (a select, not an additive "
                       f"mask)")
    matmul = _produced_by(below, "MatMul", "Softmax input (expected scores, optionally + mask)")
    nodes.append(matmul)
    return matmul, factor, None


def _check_softmax(softmax: ir.Node, opset: int) -> None:
    axis = attr_int(softmax, "axis", -1 if opset >= 13 else 1)  # the default changed in 13
    if axis not in (-1, 3):
        raise _Refused(f"Softmax '{softmax.name}' is over axis {axis}, not the last axis")


def _check_dropout(dropout: ir.Node) -> None:
    mode = dropout.inputs[2] if len(dropout.inputs) > 2 else None
    if mode is not None and (mode.const_value is None or mode.is_graph_input()
                             or bool(mode.const_value.numpy().reshape(-1)[0])):
        raise _Refused(f"Dropout '{dropout.name}' may run in training mode")
    if attr_int(dropout, "is_test", 1) == 0:
        raise _Refused(f"Dropout '{dropout.name}' is in training mode (is_test=0)")


def _check_nan_guard(where: ir.Node, probs: ir.Value) -> tuple[ir.Value, ir.Node]:
    """Where(IsNaN(probs), 0, probs), torch's SDPA export's guard for a row whose scores are all
    masked (-inf), gives such a row zero weights. Returns the zero and the IsNaN node."""
    condition, zero, kept = where.inputs
    is_nan = None if condition is None else condition.producer()
    if (is_nan is None or is_nan.op_type != "IsNaN" or is_nan.inputs[0] is not probs
            or kept is not probs):
        raise _Refused(f"Where '{where.name}' between Softmax and MatMul is not the NaN guard "
                       f"Where(IsNaN(weights), 0, weights)")
    array = _constant(zero, f"Where '{where.name}' replacement")
    if array.size != 1 or array.reshape(-1)[0] != 0:
        raise _Refused(f"Where '{where.name}' replaces NaN weights by {array.reshape(-1)[:4]}, "
                       f"not 0")
    assert zero is not None
    return zero, is_nan


def _check_mask(mask: ir.Value, scores_shape: tuple[Dim, ...],
                tracer: DimTracer) -> tuple[Dim, ...]:
    """The mask's dims, once proven to broadcast to the scores' without growing them."""
    shape = tracer.dims(mask)
    if shape is None:
        raise _Refused(f"mask '{mask.name}' has no known shape")
    padded = (1,) * (4 - len(shape)) + shape
    if len(shape) > 4 or any(m != 1 and m != s for m, s in zip(padded, scores_shape, strict=True)):
        raise _Refused(f"mask '{mask.name}' of shape {describe_dims(shape)} does not broadcast "
                       f"(provably, without growing it) to the scores' "
                       f"{describe_dims(scores_shape)}")
    if not is_static(shape) and len(shape) != 4:
        raise _Refused(f"mask '{mask.name}' has dynamic dims {describe_dims(shape)} and rank "
                       f"{len(shape)}; only a 4-D one is taken as is")
    return shape


_SHAPE_OPS = ("Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze")  # how targets read shapes


def _target_readers(nodes: list[ir.Node]) -> list[ir.Node]:
    """The Shape/Gather/Slice/Concat nodes computing the matched Reshapes' targets: they die with the
    match when only it reads them, and stay when other views share them (the dynamo exporter
    reuses one target for the Q, K and V head splits of every layer)."""
    found: list[ir.Node] = []
    stack = [n.inputs[1] for n in nodes if n.op_type == "Reshape" and len(n.inputs) > 1]
    while stack:
        value = stack.pop()
        node = None if value is None else value.producer()
        if node is None or node.op_type not in _SHAPE_OPS or node in found or node in nodes:
            continue
        found.append(node)
        if node.op_type != "Shape":
            stack.extend(node.inputs)
    return found


def _check_no_escapes(nodes: list[ir.Node], root: ir.Node) -> None:
    refusal = refuse_if_removed_outputs_escape(nodes, may_stay=_target_readers(nodes),
                                               replaced=root.outputs)
    if refusal is not None:
        raise _Refused(refusal.reason)


def parse_attention(probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value,
                    opset: int) -> Attention | MatchResult:
    """The attention whose Softmax output is `probs`, MatMul with V `ctx`, head-merge Transpose
    `merged` and Reshape `out` (as FuseMultiHeadAttention's pattern binds them), or a failed
    MatchResult saying why the subgraph above them is not one."""
    try:
        return _parse(probs, ctx, merged, out, opset)
    except _Refused as refusal:
        return MatchResult().fail(str(refusal))


def _parse(probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value,
           opset: int) -> Attention:
    tracer = DimTracer(out.graph)
    softmax, matmul_v = probs.producer(), ctx.producer()
    transpose, reshape = merged.producer(), out.producer()
    assert softmax is not None and matmul_v is not None
    assert transpose is not None and reshape is not None
    if probs.dtype not in _SUPPORTED_TYPES:
        raise _Refused(f"Softmax '{softmax.name}' output has element type {probs.dtype}, not "
                       f"float32 or float16 (unknown types need shape inference first)")
    _check_softmax(softmax, opset)
    nodes = [softmax, matmul_v, transpose, reshape]
    between = matmul_v.inputs[0].producer() if matmul_v.inputs[0] is not None else None
    nan_guard = None
    if between is not None and between.op_type == "Where":
        nan_guard, is_nan = _check_nan_guard(between, probs)
        nodes += [between, is_nan]
    elif between is not None and between is not softmax:
        _check_dropout(between)
        nodes.append(between)
    assert softmax.inputs[0] is not None and matmul_v.inputs[1] is not None
    matmul, post_scale, mask = _parse_scores(softmax.inputs[0], nodes)
    assert matmul.inputs[0] is not None and matmul.inputs[1] is not None
    q_input, q_scale = _peel_scales(matmul.inputs[0], nodes)
    k_input, k_scale = _peel_scales(matmul.inputs[1], nodes)
    query, q_nodes = _split_heads(q_input, _SPLIT_PERM, "query", tracer)
    key, k_nodes = _split_transposed_key(k_input, tracer)
    value, v_nodes = _split_heads(matmul_v.inputs[1], _SPLIT_PERM, "value", tracer)
    nodes += q_nodes + k_nodes + v_nodes
    (batch, seq, heads, head_size), (k_batch, kv_seq, k_heads, k_size) = query.shape, key.shape
    if (k_batch, k_heads, k_size) != (batch, heads, head_size) or value.shape[:3] != key.shape[:3]:
        raise _Refused(f"query {describe_dims(query.shape)}, key {describe_dims(key.shape)} and "
                       f"value {describe_dims(value.shape)} heads do not agree ([B, S, N, H], "
                       f"same B and N, proven equal)")
    if perm(transpose) != _SPLIT_PERM:
        raise _Refused(f"output Transpose '{transpose.name}' has perm {perm(transpose)}, not "
                       f"{list(_SPLIT_PERM)}")
    out_shape = _reshaped(reshape, (batch, seq, heads, value.shape[3]), tracer)
    merged_shape = (batch, seq, heads * value.shape[3])
    out_target = None
    target = tracer.contents(reshape.inputs[1])
    if out_shape != merged_shape and not is_static(out_shape + merged_shape) and (
            reshape.inputs[1] is not None and reshape.inputs[1].const_value is not None
            and target is not None and 0 not in target):
        # Without 0s (which copy dims the 4-D input and the 3-D fused output do not share), the
        # same target reshapes the fused output, in the same row-major order, to the same shape.
        out_target = reshape.inputs[1]
    elif out_shape != merged_shape and not is_static(out_shape + merged_shape):
        raise _Refused(f"output Reshape '{reshape.name}' gives {describe_dims(out_shape)}, not "
                       f"the merged heads' {describe_dims(merged_shape)} (with dynamic dims only "
                       f"that is supported)")
    mask_dims = None
    if mask is not None:
        mask_dims = _check_mask(mask, (batch, heads, seq, kv_seq), tracer)
        if not is_static((seq, kv_seq)) and opset < 15 and mask_dims[2:] != (seq, kv_seq):
            raise _Refused(f"mask '{mask.name}' must be expanded to dynamic dims "
                           f"{describe_dims((seq, kv_seq))}, which needs opset 15's Shape")
    for operand in (query.source, key.source, value.source, mask):
        if operand is not None and operand.dtype not in _SUPPORTED_TYPES:
            raise _Refused(f"'{operand.name}' has element type {operand.dtype}, not float32 or "
                           f"float16 (unknown types need shape inference first)")
    if len({v.dtype for v in (query.source, key.source, value.source, mask) if v is not None}) != 1:
        raise _Refused("query, key, value and mask element types differ")
    _check_no_escapes(nodes, reshape)
    return Attention(query, key, value, q_scale * k_scale * post_scale, mask, mask_dims,
                      out_shape, out_target, nan_guard)
