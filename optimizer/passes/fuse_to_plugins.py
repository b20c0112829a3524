"""Rewrite fusable subgraphs into fuseforge plugin nodes, for TensorRT (optimizer/plugins/).

The same written-out patterns the ONNX Runtime passes fuse, with the same rules' matching and
safety checks (subclassed from fuse_skip_layer_norm, fuse_gelu and fuse_attention), become
plugin nodes TensorRT runs with our Triton kernels:
- LayerNormalization(input + skip [+ bias]) → fuseforge.SkipLayerNorm (2nd output = the sum
  when it has other readers). The plugin takes all five inputs: a missing beta or bias is a
  zero constant (one per hidden size and type, shared).
- bias Add + GELU, written out (erf or tanh form, every spelling FUSE_GELU matches) or as the
  Gelu-20 op → fuseforge.BiasGelu(approximate "none" / "tanh").
- scaled dot-product attention from the head split to the head merge →
  fuseforge.MultiHeadAttention; without a mask, attention_bias is a [1, 1, 1, 1] zero.
The pass then runs retarget_contrib_ops.py's rules, which move the com.microsoft ops an ONNX
Runtime-optimized upload carries onto the same plugins.

Safe only under the source rules' conditions (see their modules) plus the plugins' limits:
SkipLayerNorm hidden size <= plugins.skip_layer_norm.MAX_HIDDEN, attention head sizes <=
plugins.multi_head_attention.MAX_HEAD_SIZE; float32 or float16 (what ONNX Runtime validates
the decomposed graph in); static hidden sizes.

Numerics: the plugins sum and normalize in float32 (float16 sums are not rounded between the
Adds); attention accumulates in float32 and rounds the softmax weights to the value type before
the product with V. The fused model is validated on the CPU through
plugins.decompose_for_onnxruntime, which replaces each plugin node by the standard ops it
stands for.

Backends: "tensorrt" only (ONNX Runtime has contrib ops for all three, see the other passes).
Speed: not measured here (needs a GPU); TensorRT also fuses some of these patterns itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRule

from optimizer.passes.base import FusionPass, LazyRules, PassStage
from optimizer.passes.checks import const_array
from optimizer.passes.fuse_attention import FuseMultiHeadAttention, merged_inputs, merged_output
from optimizer.passes.fuse_gelu import FuseBiasGelu, FuseGeluErf, FuseGeluTanh, split_bias
from optimizer.passes.fuse_skip_layer_norm import (
    FuseSkipLayerNorm,
    SkipPlan,
    plan_skip_layer_norm,
)
from optimizer.passes.plugin_nodes import (
    attention_bias,
    bias_gelu_node,
    multi_head_attention_node,
    refuse_head_sizes,
    skip_layer_norm_node,
)
from optimizer.passes.retarget_contrib_ops import retarget_contrib_rules
from optimizer.plugins.skip_layer_norm import MAX_HIDDEN
from optimizer.registries.backends import Backend

__all__ = [
    "FUSE_TO_PLUGINS",
    "PluginBiasGelu",
    "PluginBiasGeluErf",
    "PluginBiasGeluTanh",
    "PluginMultiHeadAttention",
    "PluginSkipLayerNorm",
]


class PluginSkipLayerNorm(FuseSkipLayerNorm):
    """LayerNormalization(input + skip [+ bias]) → fuseforge.SkipLayerNorm."""

    def check(self, context: Any, p: ir.Value, q: ir.Value, r: ir.Value | None,
              gamma: ir.Value, normalized: ir.Value, residual_sum: ir.Value,
              inner_sum: ir.Value | None = None) -> MatchResult:
        result = super().check(context, p, q, r, gamma, normalized, residual_sum, inner_sum)
        if not result:
            return result
        hidden = const_array(gamma).shape[0]
        if hidden > MAX_HIDDEN:
            return MatchResult().fail(
                f"hidden size {hidden} is above the SkipLayerNorm kernel's {MAX_HIDDEN}")
        return result

    def rewrite(self, op: Any, p: ir.Value, q: ir.Value, r: ir.Value | None, gamma: ir.Value,
                normalized: ir.Value, **_: Any) -> Any:
        plan = plan_skip_layer_norm(p, q, r, gamma, normalized)
        assert isinstance(plan, SkipPlan)  # check() accepted this match
        return skip_layer_norm_node(op, normalized.graph, plan.input, plan.skip, plan.gamma,
                                    plan.beta, plan.bias, plan.epsilon, keep_sum=self.keep_sum,
                                    zeros_like=const_array(plan.gamma))


def _bias_gelu(op: Any, p: ir.Value, q: ir.Value, approximate: str) -> Any:
    split = split_bias(p, q)
    assert not isinstance(split, MatchResult)  # check() accepted this match
    x, bias = split
    return bias_gelu_node(op, x, bias, approximate)


class PluginBiasGeluErf(FuseGeluErf):
    """Add(x, b) → 0.5 * x * (1 + Erf(x / √2)), any spelling → fuseforge.BiasGelu("none")."""

    def __init__(self) -> None:
        # The contrib lowering's checks apply: float or float16, no opset requirement.
        super().__init__(lowering="contrib")

    def _form(self, variant: str, lone: str, pair: tuple[str, str],
              lone_first: bool) -> Callable[..., Any]:
        gelu = super()._form(variant, lone, pair, lone_first)

        def form(op: Any, p: ir.Value, q: ir.Value, scale: ir.Value, one: ir.Value,
                 half: ir.Value) -> Any:
            return gelu(op, op.Add(p, q, _outputs=["biased"]), scale, one, half)

        return form

    def check(self, context: Any, p: ir.Value, q: ir.Value,  # type: ignore[override]
              scale: ir.Value, one: ir.Value, half: ir.Value, scaled: ir.Value,
              biased: ir.Value) -> MatchResult:
        split = split_bias(p, q)
        if isinstance(split, MatchResult):
            return split
        return super().check(context, biased, scale, one, half, scaled)

    def rewrite(self, op: Any, p: ir.Value, q: ir.Value,  # type: ignore[override]
                **_: Any) -> Any:
        return _bias_gelu(op, p, q, "none")


class PluginBiasGeluTanh(FuseGeluTanh):
    """Add(x, b) → GELU's tanh approximation, any spelling → fuseforge.BiasGelu("tanh")."""

    def __init__(self) -> None:
        super().__init__(lowering="contrib")  # as PluginBiasGeluErf

    def _form(self, variant: str, lone: str, pair: tuple[str, str],
              lone_first: bool) -> Callable[..., Any]:
        gelu = super()._form(variant, lone, pair, lone_first)

        def form(op: Any, p: ir.Value, q: ir.Value, three: ir.Value, cubic: ir.Value,
                 sqrt_2_over_pi: ir.Value, one: ir.Value, half: ir.Value) -> Any:
            biased = op.Add(p, q, _outputs=["biased"])
            return gelu(op, biased, three, cubic, sqrt_2_over_pi, one, half)

        return form

    def check(self, context: Any, p: ir.Value, q: ir.Value,  # type: ignore[override]
              three: ir.Value | None, cubic: ir.Value, sqrt_2_over_pi: ir.Value,
              one: ir.Value, half: ir.Value, biased: ir.Value) -> MatchResult:
        split = split_bias(p, q)
        if isinstance(split, MatchResult):
            return split
        return super().check(context, biased, three, cubic, sqrt_2_over_pi, one, half)

    def rewrite(self, op: Any, p: ir.Value, q: ir.Value,  # type: ignore[override]
                **_: Any) -> Any:
        return _bias_gelu(op, p, q, "tanh")


class PluginBiasGelu(FuseBiasGelu):
    """Add(x, b) + a GELU op (Gelu-20, com.microsoft Gelu or FastGelu) → fuseforge.BiasGelu."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.name = f"PluginBias{source}"

    def rewrite(self, op: Any, p: ir.Value, q: ir.Value, activated: ir.Value,
                **_: Any) -> Any:
        return _bias_gelu(op, p, q, self._approximate(activated))


class PluginMultiHeadAttention(FuseMultiHeadAttention):
    """Head split → Q·Kᵀ·scale [+ mask] → Softmax → ·V → head merge → fuseforge.MHA."""

    def check(self, context: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
              probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> MatchResult:
        result = super().check(context, scores, value, out_shape, probs, ctx, merged, out)
        if not result:
            return result
        assert self._attention is not None  # parsed by the check above
        refusal = refuse_head_sizes(self._attention.query.shape[3],
                                    self._attention.value.shape[3])
        return result if refusal is None else refusal

    def rewrite(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
                probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> ir.Value:
        attention, graph = self._attention, out.graph
        assert attention is not None and probs.dtype is not None
        query, key, value_ = merged_inputs(op, graph, attention)
        rank = None if attention.mask_dims is None else len(attention.mask_dims)
        bias = attention_bias(op, graph, attention.mask, probs.dtype.numpy(), rank)
        _, _, heads, _ = attention.query.shape
        fused = multi_head_attention_node(op, query, key, value_, bias, num_heads=heads,
                                          scale=attention.scale)
        return merged_output(op, graph, attention, fused)


def _rules() -> Sequence[RewriteRule]:
    return [
        # Bias forms first, so the bias Add is taken in rather than left before the plugin.
        PluginSkipLayerNorm.rule("PluginSkipLayerNormBias", bias=True, keep_sum=False),
        PluginSkipLayerNorm.rule("PluginSkipLayerNormBiasKeepSum", bias=True, keep_sum=True),
        PluginSkipLayerNorm.rule("PluginSkipLayerNorm", bias=False, keep_sum=False),
        PluginSkipLayerNorm.rule("PluginSkipLayerNormKeepSum", bias=False, keep_sum=True),
        PluginBiasGeluErf.rule(),
        PluginBiasGeluTanh.rule(),
        PluginBiasGelu.rule("OnnxGelu"),
        PluginBiasGelu.rule("Gelu"),
        PluginBiasGelu.rule("FastGelu"),
        PluginMultiHeadAttention.rule(),
        # Contrib ops still standing (their bias Adds, if any, were folded just above).
        *retarget_contrib_rules(),
    ]


FUSE_TO_PLUGINS = FusionPass(
    name="fuse_to_plugins",
    summary="Rewrite Add + LayerNormalization, bias Add + GELU and scaled dot-product "
            "attention (written out, or as the com.microsoft ops) into fuseforge plugin nodes "
            "for TensorRT",
    stage=PassStage.OTHER,
    rules=LazyRules({Backend.TENSORRT: _rules}),
)
