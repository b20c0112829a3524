"""Fuse scaled dot-product attention, from the head split to the head merge, into one op.

The matched subgraph, for query/key/value sources q [.., S, N*H], k and v [.., T, N*H(v)]:
    Q = Transpose(Reshape(q, [B, S, N, H]), [0, 2, 1, 3])               (likewise V from v)
    Kᵀ = Transpose(Reshape(k, [B, T, N, H]), [0, 2, 3, 1]), or the [0, 2, 1, 3] split followed
         by Transpose [0, 1, 3, 2], or by Reshape [B*N, T, H] → Transpose [0, 2, 1] →
         Reshape [B, N, H, T] (what torch's dynamo exporter writes for SDPA)
    scores = (a·Q) @ (b·Kᵀ) · c  [+ mask]     a, b, c: constant scalars, Mul or Div, each optional
    out = Reshape(Transpose(Softmax(scores, -1) [→ inference Dropout] @ V, [0, 2, 1, 3]), shape)
Since Reshape keeps row-major order and the split/merge only regroup the last axis into heads,
    out = Reshape(MultiHeadAttention(q', k', v', attention_bias=mask', num_heads=N,
                                     scale=a·b·c), shape)
with q' = q viewed as [B, S, N*H] (k', v' likewise) and mask' = mask broadcast to the
[B or 1, N or 1, S, T] the op requires; the op splits heads the same way (com.microsoft
MultiHeadAttention, runs on the CPU provider in float32 and float16, verified by running it).

Safe only when: every scale is a constant (not a graph input); every Reshape target is a constant
or read from shapes (Concat of Shape/Gather and constants), and resolves, with N and H static, to
dims B, S, T that are static or proven equal between Q, K, V and the mask by
symbolic_dims.DimTracer (which traces each dynamic dim back to the input dim it comes from); with
dynamic dims, q, k and v must already be [B, S, N*H] (no extra view), the head merge must give [B,
S, N*Hv] or use a constant target without 0s, and a mask must be 4-D; scales are single finite
values (a zero scale would read as "use the default" in the op); the Softmax is over the last axis;
the mask is added (a Where/select mask is not additive) before any scaling, and broadcasts to [B,
N, S, T] without growing it; a Dropout between Softmax and MatMul is in inference mode; the element
type is float32 or float16; and no intermediate is a graph output or feeds another node.

No tensorrt rules here: for TensorRT, lower_to_plugins.PluginMultiHeadAttention reuses this
matching to emit the fuseforge.MultiHeadAttention plugin node instead.

Speed (bench/fuse_attention.py, a BERT encoder as torch's dynamo exporter writes it, seq 128,
hidden/heads 256/4 and 768/12, batch 1 and 8, one ORT CPU thread): fused / unfused time ratios
of 0.98-1.03 both with ORT's graph optimizations disabled and at its default ("all"): the
projection and FFN GEMMs are ~90% of the time and the op's kernel costs about what the MLAS
MatMuls and element-wise ops it replaces do. Not slower, so on by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, OrValue, RewriteRuleClassBase

from optimizer.passes.base import FusionPass
from optimizer.passes.checks import attr_int, unique_initializer_name
from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS
from optimizer.passes.symbolic_dims import (
    Dim,
    DimTracer,
    ShapeProofError,
    describe_dims,
    reshape_dims,
)

__all__ = ["FUSE_ATTENTION", "FuseMultiHeadAttention"]

_SPLIT_PERM = (0, 2, 1, 3)  # [B, S, N, H] → [B, N, S, H], and back for the merge
_SUPPORTED_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)  # the op's CPU kernels


class _Refused(Exception):
    """Raised while parsing the subgraph; the message is the refusal reason."""


@dataclass(frozen=True)
class _Heads:
    """One of Q, K, V: its source before the head split and the [B, S, N, H] it was split to."""

    source: ir.Value
    shape: tuple[Dim, Dim, int, int]  # B and S may be dynamic (traced keys), N and H are not
    source_dims: tuple[Dim, ...]

    @property
    def merged_shape(self) -> tuple[Dim, Dim, int]:
        batch, seq, heads, head_size = self.shape
        return batch, seq, heads * head_size


@dataclass(frozen=True)
class _Attention:
    query: _Heads
    key: _Heads
    value: _Heads
    scale: float
    mask: ir.Value | None
    mask_dims: tuple[Dim, ...] | None
    out_shape: tuple[Dim, ...]
    out_target: ir.Value | None = None  # a constant target to reshape the fused output with


def _producer(value: ir.Value | None, op_type: str, what: str) -> ir.Node:
    node = None if value is None else value.producer()
    if node is None or node.op_type != op_type or node.domain not in ONNX_DOMAINS:
        found = "a graph input or constant" if node is None else f"{node.op_type} '{node.name}'"
        name = None if value is None else value.name
        raise _Refused(f"{what} '{name}' comes from {found}, not {op_type}")
    return node


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    if value.shape is None or not all(isinstance(d, int) for d in value.shape.dims):
        return None
    return tuple(int(d) for d in value.shape.dims)  # type: ignore[arg-type]


def _constant(value: ir.Value | None, what: str) -> np.ndarray:
    if value is None or value.const_value is None:
        raise _Refused(f"{what} '{value.name if value else None}' is not a constant")
    if value.is_graph_input():
        raise _Refused(f"{what} '{value.name}' is also a graph input, so it can change")
    return value.const_value.numpy()


def _perm(node: ir.Node) -> tuple[int, ...] | None:
    attr = node.attributes.get("perm")
    return None if attr is None else tuple(attr.as_ints())


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


def _split_heads(value: ir.Value, perm: tuple[int, ...], what: str,
                 tracer: DimTracer) -> tuple[_Heads, list[ir.Node]]:
    """`value` = Transpose(Reshape(source, [B, S, N, H]), perm)."""
    transpose = _producer(value, "Transpose", what)
    if _perm(transpose) != perm:
        raise _Refused(f"{what} Transpose '{transpose.name}' has perm {_perm(transpose)}, "
                       f"not {list(perm)}")
    reshape = _producer(transpose.inputs[0], "Reshape", f"{what} head split")
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
    heads_ = _Heads(source, (shape[0], shape[1], heads, head_size),
                    source_dims if source_dims is not None else ())
    if not _is_static(heads_.merged_shape) and source_dims != heads_.merged_shape:
        raise _Refused(f"{what} source '{source.name}' has dims {describe_dims(source_dims)}, "
                       f"not the [B, S, N*H] {describe_dims(heads_.merged_shape)} its head "
                       f"split gives (a reshape with dynamic dims is not supported)")
    return heads_, [transpose, reshape]


def _is_static(dims: tuple[Dim, ...]) -> bool:
    return all(isinstance(d, int) for d in dims)


def _split_transposed_key(value: ir.Value, tracer: DimTracer) -> tuple[_Heads, list[ir.Node]]:
    """Kᵀ [B, N, H, T] in one of the three forms the module docstring lists."""
    node = value.producer()
    if node is not None and node.op_type == "Transpose" and _perm(node) == (0, 2, 3, 1):
        return _split_heads(value, (0, 2, 3, 1), "key", tracer)
    if node is not None and node.op_type == "Transpose":
        if _perm(node) != (0, 1, 3, 2):
            raise _Refused(f"key Transpose '{node.name}' has perm {_perm(node)}, not [0, 1, 3, 2]")
        assert node.inputs[0] is not None
        key, nodes = _split_heads(node.inputs[0], _SPLIT_PERM, "key", tracer)
        return key, [node, *nodes]
    # Reshape [B*N, T, H] → Transpose [0, 2, 1] → Reshape [B, N, H, T]
    outer = _producer(value, "Reshape", "transposed key")
    transpose = _producer(outer.inputs[0], "Transpose", "transposed key")
    inner = _producer(transpose.inputs[0], "Reshape", "transposed key")
    assert inner.inputs[0] is not None
    key, nodes = _split_heads(inner.inputs[0], _SPLIT_PERM, "key", tracer)
    batch, seq, heads, head_size = key.shape
    if not isinstance(batch, int) or not isinstance(seq, int):
        raise _Refused(f"key Reshape '{inner.name}' flattens batch and heads, which needs a "
                       f"static batch and sequence (found {describe_dims(key.shape)})")
    flat = _reshaped(inner, (batch, heads, seq, head_size), tracer)
    if flat != (batch * heads, seq, head_size) or _perm(transpose) != (0, 2, 1):
        raise _Refused(f"key Reshape/Transpose '{inner.name}'/'{transpose.name}' is not a "
                       f"transpose of the last two axes")
    if _reshaped(outer, (batch * heads, head_size, seq), tracer) != (batch, heads, head_size, seq):
        raise _Refused(f"key Reshape '{outer.name}' does not give [B, N, H, T]")
    return key, [outer, transpose, inner, *nodes]


def _peel_scales(value: ir.Value, nodes: list[ir.Node]) -> tuple[ir.Value, float]:
    """Strip Mul/Div by constant scalars above `value`; returns the input and the product."""
    factor = 1.0
    while (node := value.producer()) is not None and node.op_type in ("Mul", "Div"):
        operands = [(0, 1), (1, 0)] if node.op_type == "Mul" else [(0, 1)]
        for keep, scale in operands:
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
                matmul = _producer(below, "MatMul", "attention scores")
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
    matmul = _producer(below, "MatMul", "Softmax input (expected scores, optionally + mask)")
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
    if not _is_static(shape) and len(shape) != 4:
        raise _Refused(f"mask '{mask.name}' has dynamic dims {describe_dims(shape)} and rank "
                       f"{len(shape)}; only a 4-D one is taken as is")
    return shape


_SHAPE_OPS = ("Shape", "Gather", "Concat", "Unsqueeze", "Squeeze")  # how targets read shapes


def _target_readers(nodes: list[ir.Node]) -> list[ir.Node]:
    """The Shape/Gather/Concat nodes computing the matched Reshapes' targets: they die with the
    match, so their reading an intermediate's shape is no escape (they must feed nothing else)."""
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
    nodes = nodes + _target_readers(nodes)
    inside = set(nodes)
    for node in nodes:
        if node is root:
            continue
        for value in node.outputs:
            if value.is_graph_output():
                raise _Refused(f"'{value.name}' is a graph output, so it must stay computed")
            for user, _ in value.uses():
                if user not in inside:
                    raise _Refused(f"'{value.name}' is also used by node '{user.name}' "
                                   f"({user.op_type})")


def _parse(probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value,
           opset: int) -> _Attention:
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
    dropout = matmul_v.inputs[0].producer() if matmul_v.inputs[0] is not None else None
    if dropout is not None and dropout is not softmax:
        _check_dropout(dropout)
        nodes.append(dropout)
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
    if _perm(transpose) != _SPLIT_PERM:
        raise _Refused(f"output Transpose '{transpose.name}' has perm {_perm(transpose)}, not "
                       f"{list(_SPLIT_PERM)}")
    out_shape = _reshaped(reshape, (batch, seq, heads, value.shape[3]), tracer)
    merged_shape = (batch, seq, heads * value.shape[3])
    out_target = None
    target = tracer.contents(reshape.inputs[1])
    if out_shape != merged_shape and not _is_static(out_shape + merged_shape) and (
            reshape.inputs[1] is not None and reshape.inputs[1].const_value is not None
            and target is not None and 0 not in target):
        # Without 0s (which copy dims the 4-D input and the 3-D fused output do not share), the
        # same target reshapes the fused output, in the same row-major order, to the same shape.
        out_target = reshape.inputs[1]
    elif out_shape != merged_shape and not _is_static(out_shape + merged_shape):
        raise _Refused(f"output Reshape '{reshape.name}' gives {describe_dims(out_shape)}, not "
                       f"the merged heads' {describe_dims(merged_shape)} (with dynamic dims only "
                       f"that is supported)")
    mask_dims = None
    if mask is not None:
        mask_dims = _check_mask(mask, (batch, heads, seq, kv_seq), tracer)
        if not _is_static((seq, kv_seq)) and opset < 15 and mask_dims[2:] != (seq, kv_seq):
            raise _Refused(f"mask '{mask.name}' must be expanded to dynamic dims "
                           f"{describe_dims((seq, kv_seq))}, which needs opset 15's Shape")
    for operand in (query.source, key.source, value.source, mask):
        if operand is not None and operand.dtype not in _SUPPORTED_TYPES:
            raise _Refused(f"'{operand.name}' has element type {operand.dtype}, not float32 or "
                           f"float16 (unknown types need shape inference first)")
    if len({v.dtype for v in (query.source, key.source, value.source, mask) if v is not None}) != 1:
        raise _Refused("query, key, value and mask element types differ")
    _check_no_escapes(nodes, reshape)
    return _Attention(query, key, value, q_scale * k_scale * post_scale, mask, mask_dims,
                      out_shape, out_target)


class FuseMultiHeadAttention(RewriteRuleClassBase):
    """Head split → Q·Kᵀ·scale [+ mask] → Softmax → ·V → head merge  →  MultiHeadAttention."""

    def __init__(self) -> None:
        # The head of the subgraph is parsed in check(), not matched by the pattern (so every
        # refusal has a reason); those nodes die with the rewrite and are swept afterwards.
        super().__init__(remove_nodes=False)
        self._attention: _Attention | None = None

    def pattern(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value) -> ir.Value:
        probs = op.Softmax(scores, _outputs=["probs"])
        kept = OrValue([op.Dropout(probs, _allow_other_inputs=True), probs])
        ctx = op.MatMul(kept, value, _outputs=["ctx"])
        merged = op.Transpose(ctx, _outputs=["merged"])
        return op.Reshape(merged, out_shape, _outputs=["out"])

    def check(self, context: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
              probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> MatchResult:
        opset = context.graph_or_function.opset_imports.get("", 13)
        try:
            self._attention = _parse(probs, ctx, merged, out, opset)
        except _Refused as refusal:
            return MatchResult().fail(str(refusal))
        return MatchResult()

    def rewrite(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
                probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> ir.Value:
        attention, graph = self._attention, out.graph
        assert attention is not None
        inputs: list[ir.Value | None] = list(_merged_inputs(op, graph, attention))
        _, _, heads, _ = attention.query.shape
        if attention.mask is not None:
            inputs += [None, None, _mask_for_op(op, graph, attention)]
        fused = op.MultiHeadAttention(*inputs, _domain=MS_DOMAIN, num_heads=heads,
                                      scale=attention.scale)
        return merged_output(op, graph, attention, fused)


def _merged_inputs(op: Any, graph: ir.Graph | None,
                   attention: _Attention) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Query, key and value as [B, S, N*H] (a view of each source; the source itself when it
    already is, the one case _parse accepts with dynamic dims)."""
    query, key, value = (
        split.source if split.source_dims == split.merged_shape
        else _as_shape(op, graph, split.source, split.merged_shape)  # type: ignore[arg-type]
        for split in (attention.query, attention.key, attention.value))
    return query, key, value


def merged_output(op: Any, graph: ir.Graph | None, attention: _Attention,
                  fused: ir.Value) -> ir.Value:
    """The fused [B, S, N*Hv] output as the head merge's Reshape gave it."""
    batch, seq, heads, _ = attention.query.shape
    merged_shape = (batch, seq, heads * attention.value.shape[3])
    if attention.out_shape == merged_shape:
        return fused
    if attention.out_target is not None:
        return op.Reshape(fused, attention.out_target)
    return _as_shape(op, graph, fused, attention.out_shape,  # type: ignore[arg-type]
                     known=merged_shape)  # type: ignore[arg-type]


def _shape_constant(op: Any, graph: ir.Graph | None, base: str, dims: tuple[int, ...]) -> ir.Value:
    name = unique_initializer_name(graph, base)
    return op.initializer(ir.tensor(np.array(dims, dtype=np.int64), name=name))


def _as_shape(op: Any, graph: ir.Graph | None, value: ir.Value, dims: tuple[int, ...],
              known: tuple[int, ...] | None = None) -> ir.Value:
    """`value` reshaped to `dims` (a view: same row-major order), or itself if already so."""
    if (known or _static_shape(value)) == dims:
        return value
    return op.Reshape(value, _shape_constant(op, graph, f"{value.name}_mha_shape", dims))


def _mask_for_op(op: Any, graph: ir.Graph | None, attention: _Attention) -> ir.Value:
    """The mask as the op's attention_bias: [B or 1, N or 1, S, T] (it does not broadcast S, T)."""
    mask, shape = attention.mask, attention.mask_dims
    assert mask is not None and shape is not None
    padded = (1,) * (4 - len(shape)) + shape
    seq, kv_seq = attention.query.shape[1], attention.key.shape[1]
    target = (padded[0], padded[1], seq, kv_seq)
    if shape == target:
        return mask
    if not _is_static(target):
        # _parse allows dynamic dims only on a 4-D mask: expand S and T read off query and key.
        lead = _shape_constant(op, graph, f"{mask.name}_bnst_lead", (1, 1))
        dims = op.Concat(lead, op.Shape(attention.query.source, start=1, end=2),
                         op.Shape(attention.key.source, start=1, end=2), axis=0)
        return op.Expand(mask, dims)
    # Static from here: the target's dims, and so the mask's (each 1 or the target's), are ints.
    static = tuple(int(d) for d in target)  # type: ignore[arg-type]
    padded_static = tuple(int(d) for d in padded)  # type: ignore[arg-type]
    if mask.const_value is not None and not mask.is_graph_input():
        array = np.broadcast_to(mask.const_value.numpy().reshape(padded_static), static)
        return _shared_constant(op, graph, f"{mask.name}_attention_bias", array)
    if padded_static == static:
        return _as_shape(op, graph, mask, static)
    shape_value = _shape_constant(op, graph, f"{mask.name}_bnst_shape", (1, 1) + static[2:])
    return op.Expand(mask, shape_value)  # Expand broadcasts both ways: [B|1, N|1, S, T]


def _shared_constant(op: Any, graph: ir.Graph | None, base: str, array: np.ndarray) -> ir.Value:
    """A constant holding `array`, reusing one an earlier rewrite made (a causal mask is often
    shared by every layer: one copy each would multiply its memory)."""
    if graph is not None:
        existing = graph.initializers.get(base)
        if (existing is not None and existing.const_value is not None
                and existing.const_value.dtype == ir.DataType.from_numpy(array.dtype)
                and np.array_equal(existing.const_value.numpy(), array)):
            return existing
    name = unique_initializer_name(graph, base)
    return op.initializer(ir.tensor(np.ascontiguousarray(array), name=name))


FUSE_ATTENTION = FusionPass(
    name="fuse_attention",
    summary="Fuse scaled dot-product attention between the head split and merge into "
            "com.microsoft.MultiHeadAttention",
    stage="other",
    rules={"onnxruntime": [FuseMultiHeadAttention.rule()]},
)
