"""Fuse scaled dot-product attention, from the head split to the head merge, into one op.

The matched subgraph, for query/key/value sources q [.., S, N*H], k and v [.., T, N*H(v)]:
    Q = Transpose(Reshape(q, [B, S, N, H]), [0, 2, 1, 3])               (likewise V from v)
    Kᵀ = Transpose(Reshape(k, [B, T, N, H]), [0, 2, 3, 1]), or the [0, 2, 1, 3] split followed
         by Transpose [0, 1, 3, 2], or by Reshape [B*N, T, H] → Transpose [0, 2, 1] →
         Reshape [B, N, H, T] (what torch's dynamo exporter writes for SDPA; with a dynamic B
         or T, the targets must read [-1, T, H] and [B, N, H, T], B, T traced from K's shape)
    scores = (a·Q) @ (b·Kᵀ) · c  [+ mask]     a, b, c: constant scalars, Mul or Div, each optional
    out = Reshape(Transpose(W @ V, [0, 2, 1, 3]), shape), with the weights W = Softmax(scores, -1)
          [→ inference Dropout, or → Where(IsNaN(W), 0, W): torch's SDPA export's guard]
Since Reshape keeps row-major order and the split/merge only regroup the last axis into heads,
    out = Reshape(MultiHeadAttention(q', k', v', attention_bias=mask', num_heads=N,
                                     scale=a·b·c), shape)
with q' = q viewed as [B, S, N*H] (k', v' likewise) and mask' = mask broadcast to the
[B or 1, N or 1, S, T] the op requires; the op splits heads the same way (com.microsoft
MultiHeadAttention, runs on the CPU provider in float32 and float16, verified by running it).
With the guard, out = Reshape(Where(IsNaN(o), 0, o), shape) for the op's output o: a row of W
is NaN exactly when its scores are all -inf (a query whose keys are all masked) or hold a NaN; the
guard makes that row 0, so its output is 0·V = 0, while the op gives NaN for the row's whole head
slice, and (for finite V) NaN nowhere else.

Safe only when: every scale is a constant (not a graph input); every Reshape target is a constant
or read from shapes (Concat of Shape/Gather and constants), and resolves, with N and H static, to
dims B, S, T that are static or proven equal between Q, K, V and the mask by
symbolic_dims.DimTracer (which traces each dynamic dim back to the input dim it comes from); with
dynamic dims, q, k and v must already be [B, S, N*H] (no extra view), the head merge must give [B,
S, N*Hv] or use a constant target without 0s, and a mask must be 4-D; scales are single finite
values (a zero scale would read as "use the default" in the op); the Softmax is over the last axis;
the mask is added (a Where/select mask is not additive) before any scaling, and broadcasts to [B,
N, S, T] without growing it; a Dropout between Softmax and MatMul is in inference mode; the element
type is float32 or float16; and no intermediate the fusion removes is a graph output or feeds a
node outside the match. Reshape targets stay and may feed other views: torch's dynamo exporter
shares one [B, S, N, H] target among the Q, K and V head splits of every layer, and one [B, S,
N*H] target among the head merges (checks.refuse_if_removed_outputs_escape).

The subgraph is parsed by attention_pattern.parse_attention. No tensorrt rules here: for
TensorRT, fuse_to_plugins.PluginMultiHeadAttention reuses this rule's parsing to emit the
fuseforge.MultiHeadAttention plugin node instead.

Speed (bench/fuse_attention.py, a BERT encoder as torch's dynamo exporter writes it, seq 128,
hidden/heads 256/4 and 768/12, batch 1 and 8, one ORT CPU thread): fused / unfused time ratios
of 0.98-1.03 both with ORT's graph optimizations disabled and at its default ("all"): the
projection and FFN GEMMs are ~90% of the time and the op's kernel costs about what the MLAS
MatMuls and element-wise ops it replaces do. Not slower, so on by default.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, OrValue, RewriteRuleClassBase

from optimizer.passes.attention_pattern import Attention, is_static, parse_attention
from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.checks import shared_constant, static_shape, unique_initializer_name
from optimizer.passes.matching import MS_DOMAIN
from optimizer.registries.backends import Backend

__all__ = [
    "FUSE_ATTENTION",
    "FuseMultiHeadAttention",
    "as_shape",
    "merged_inputs",
    "merged_output",
]


class FuseMultiHeadAttention(RewriteRuleClassBase):
    """Head split → Q·Kᵀ·scale [+ mask] → Softmax → ·V → head merge  →  MultiHeadAttention."""

    def __init__(self) -> None:
        # The head of the subgraph is parsed in check(), not matched by the pattern (so every
        # refusal has a reason); those nodes die with the rewrite and are swept afterwards.
        super().__init__(remove_nodes=False)
        self._attention: Attention | None = None

    def pattern(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value) -> ir.Value:
        probs = op.Softmax(scores, _outputs=["probs"])
        kept = OrValue([op.Dropout(probs, _allow_other_inputs=True),
                        op.Where(op.IsNaN(probs), _allow_other_inputs=True), probs])
        ctx = op.MatMul(kept, value, _outputs=["ctx"])
        merged = op.Transpose(ctx, _outputs=["merged"])
        return op.Reshape(merged, out_shape, _outputs=["out"])

    def check(self, context: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
              probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> MatchResult:
        opset = context.graph_or_function.opset_imports.get("", 13)
        parsed = parse_attention(probs, ctx, merged, out, opset)
        if isinstance(parsed, MatchResult):
            return parsed
        self._attention = parsed
        return MatchResult()

    def rewrite(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
                probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> ir.Value:
        attention, graph = self._attention, out.graph
        assert attention is not None
        inputs: list[ir.Value | None] = list(merged_inputs(op, graph, attention))
        _, _, heads, _ = attention.query.shape
        if attention.mask is not None:
            inputs += [None, None, _mask_for_op(op, graph, attention)]
        fused = op.MultiHeadAttention(*inputs, _domain=MS_DOMAIN, num_heads=heads,
                                      scale=attention.scale)
        return merged_output(op, graph, attention, fused)


def merged_inputs(op: Any, graph: ir.Graph | None,
                  attention: Attention) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Query, key and value as [B, S, N*H] (a view of each source; the source itself when it
    already is, the one case parse_attention accepts with dynamic dims)."""
    query, key, value = (
        split.source if split.source_dims == split.merged_shape
        else as_shape(op, graph, split.source, split.merged_shape)  # type: ignore[arg-type]
        for split in (attention.query, attention.key, attention.value))
    return query, key, value


def merged_output(op: Any, graph: ir.Graph | None, attention: Attention,
                  fused: ir.Value) -> ir.Value:
    """The fused [B, S, N*Hv] output as the head merge's Reshape gave it (and as the NaN guard
    left it, if the model has one)."""
    if attention.nan_guard is not None:
        fused = op.Where(op.IsNaN(fused), attention.nan_guard, fused)
    batch, seq, heads, _ = attention.query.shape
    merged_shape = (batch, seq, heads * attention.value.shape[3])
    if attention.out_shape == merged_shape:
        return fused
    if attention.out_target is not None:
        return op.Reshape(fused, attention.out_target)
    return as_shape(op, graph, fused, attention.out_shape,  # type: ignore[arg-type]
                    known=merged_shape)  # type: ignore[arg-type]


def _shape_constant(op: Any, graph: ir.Graph | None, base: str, dims: tuple[int, ...]) -> ir.Value:
    name = unique_initializer_name(graph, base)
    return op.initializer(ir.tensor(np.array(dims, dtype=np.int64), name=name))


def as_shape(op: Any, graph: ir.Graph | None, value: ir.Value, dims: tuple[int, ...],
             known: tuple[int, ...] | None = None) -> ir.Value:
    """`value` reshaped to `dims` (a view: same row-major order), or itself if already so."""
    if (known or static_shape(value)) == dims:
        return value
    return op.Reshape(value, _shape_constant(op, graph, f"{value.name}_mha_shape", dims))


def _mask_for_op(op: Any, graph: ir.Graph | None, attention: Attention) -> ir.Value:
    """The mask as the op's attention_bias: [B or 1, N or 1, S, T] (it does not broadcast S, T)."""
    mask, shape = attention.mask, attention.mask_dims
    assert mask is not None and shape is not None
    padded = (1,) * (4 - len(shape)) + shape
    seq, kv_seq = attention.query.shape[1], attention.key.shape[1]
    target = (padded[0], padded[1], seq, kv_seq)
    if shape == target:
        return mask
    if not is_static(target):
        # parse_attention allows dynamic dims only on a 4-D mask: expand S and T read off query
        # and key.
        lead = _shape_constant(op, graph, f"{mask.name}_bnst_lead", (1, 1))
        dims = op.Concat(lead, op.Shape(attention.query.source, start=1, end=2),
                         op.Shape(attention.key.source, start=1, end=2), axis=0)
        return op.Expand(mask, dims)
    # Static from here: the target's dims, and so the mask's (each 1 or the target's), are ints.
    static = tuple(int(d) for d in target)  # type: ignore[arg-type]
    padded_static = tuple(int(d) for d in padded)  # type: ignore[arg-type]
    if mask.const_value is not None and not mask.is_graph_input():
        array = np.broadcast_to(mask.const_value.numpy().reshape(padded_static), static)
        return shared_constant(op, graph, f"{mask.name}_attention_bias", array)
    if padded_static == static:
        return as_shape(op, graph, mask, static)
    shape_value = _shape_constant(op, graph, f"{mask.name}_bnst_shape", (1, 1) + static[2:])
    return op.Expand(mask, shape_value)  # Expand broadcasts both ways: [B|1, N|1, S, T]


FUSE_ATTENTION = FusionPass(
    name="fuse_attention",
    summary="Fuse scaled dot-product attention between the head split and merge into "
            "com.microsoft.MultiHeadAttention",
    stage=PassStage.OTHER,
    rules={Backend.ONNXRUNTIME: [FuseMultiHeadAttention.rule()]},
)
