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
It also retargets the com.microsoft ops an ONNX Runtime-optimized upload carries and TensorRT's
parser rejects ("No importer registered for op: MultiHeadAttention"): SkipLayerNormalization,
BiasGelu, FastGelu (with bias), Gelu + bias Add, and MultiHeadAttention with separate 3-D
query, key and value, when their attributes and inputs are ones the plugins implement.

Safe only under the source rules' conditions (see their modules) plus the plugins' limits:
SkipLayerNorm hidden size <= plugins.skip_layer_norm.MAX_HIDDEN, attention head sizes <=
plugins.multi_head_attention.MAX_HEAD_SIZE; float32 or float16 (what ONNX Runtime validates
the decomposed graph in); static hidden sizes.

Numerics: the plugins sum and normalize in float32 (float16 sums are not rounded between the
Adds); attention accumulates in float32 and rounds the softmax weights to the value type before
the product with V. The fused model is validated on the CPU through
plugins.decompose_for_onnxruntime, which replaces each plugin node by the standard ops it stands for.

Backends: "tensorrt" only (ONNX Runtime has contrib ops for all three, see the other passes).
Speed: not measured here (needs a GPU); TensorRT also fuses some of these patterns itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.base import FusionPass
from optimizer.passes.checks import (
    attr_float,
    attr_int,
    const_array,
    first_refusal,
    refuse_if_intermediates_escape,
    refuse_unknown_attributes,
)
from optimizer.passes.checks import shared_constant as _shared_constant
from optimizer.passes.checks import static_shape as _static_shape
from optimizer.passes.fuse_attention import FuseMultiHeadAttention, merged_output
from optimizer.passes.fuse_attention import as_shape as _as_shape
from optimizer.passes.fuse_attention import merged_inputs as _merged_inputs
from optimizer.passes.fuse_gelu import FuseBiasGelu, FuseGeluErf, FuseGeluTanh, _split_bias
from optimizer.passes.fuse_skip_layer_norm import FuseSkipLayerNorm, _plan, _SkipPlan
from optimizer.passes.matching import MS_DOMAIN, node_label
from optimizer.plugins import DOMAIN
from optimizer.plugins.bias_gelu import PLUGIN as BIAS_GELU
from optimizer.plugins.multi_head_attention import MAX_HEAD_SIZE
from optimizer.plugins.multi_head_attention import PLUGIN as MULTI_HEAD_ATTENTION
from optimizer.plugins.skip_layer_norm import MAX_HIDDEN
from optimizer.plugins.skip_layer_norm import PLUGIN as SKIP_LAYER_NORM

__all__ = [
    "FUSE_TO_PLUGINS",
    "PluginBiasGelu",
    "PluginBiasGeluErf",
    "PluginBiasGeluTanh",
    "PluginMultiHeadAttention",
    "PluginSkipLayerNorm",
    "RetargetContribGelu",
    "RetargetContribMultiHeadAttention",
    "RetargetContribSkipLayerNorm",
]

_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)  # what ONNX Runtime validates on the CPU


def _zeros(op: Any, graph: ir.Graph | None, shape: tuple[int, ...], dtype: np.dtype) -> ir.Value:
    """A zero constant, one per shape and type in the graph (every layer shares it)."""
    name = f"fuseforge_zeros_{'x'.join(map(str, shape))}_{dtype.name}"
    return _shared_constant(op, graph, name, np.zeros(shape, dtype))


# --- SkipLayerNorm --------------------------------------------------------------------------

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
        plan = _plan(p, q, r, gamma, normalized)
        assert isinstance(plan, _SkipPlan)  # check() accepted this match
        return _skip_layer_norm(op, normalized.graph, plan.input, plan.skip, plan.gamma,
                                plan.beta, plan.bias, plan.epsilon, keep_sum=self.keep_sum,
                                zeros_like=const_array(plan.gamma))


def _skip_layer_norm(op: Any, graph: ir.Graph | None, input_: ir.Value, skip: ir.Value,
                     gamma: ir.Value, beta: ir.Value | None, bias: ir.Value | None,
                     epsilon: float, *, keep_sum: bool, zeros_like: np.ndarray) -> Any:
    """The plugin node; a missing beta or bias is a zero vector shaped and typed `zeros_like`."""
    if beta is None or bias is None:  # one constant for both: it joins the graph after rewrite
        zeros = _zeros(op, graph, zeros_like.shape, zeros_like.dtype)
        beta = zeros if beta is None else beta
        bias = zeros if bias is None else bias
    attributes = SKIP_LAYER_NORM.node_attributes(epsilon=epsilon)
    if not keep_sum:
        return op.SkipLayerNorm(input_, skip, gamma, beta, bias, _domain=DOMAIN, **attributes)
    output, total = op.SkipLayerNorm(input_, skip, gamma, beta, bias, _domain=DOMAIN,
                                     _outputs=2, **attributes)
    return output, total


# --- BiasGelu -------------------------------------------------------------------------------

def _bias_gelu(op: Any, p: ir.Value, q: ir.Value, approximate: str) -> Any:
    split = _split_bias(p, q)
    assert not isinstance(split, MatchResult)  # check() accepted this match
    x, bias = split
    return op.BiasGelu(x, bias, _domain=DOMAIN,
                       **BIAS_GELU.node_attributes(approximate=approximate))


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
        split = _split_bias(p, q)
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
        split = _split_bias(p, q)
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


# --- MultiHeadAttention ---------------------------------------------------------------------

def _refuse_head_sizes(head_size: int, head_size_v: int) -> MatchResult | None:
    if max(head_size, head_size_v) > MAX_HEAD_SIZE:
        return MatchResult().fail(f"head sizes {head_size}/{head_size_v} are above the "
                                  f"MultiHeadAttention kernel's {MAX_HEAD_SIZE}")
    return None


def _attention_bias(op: Any, graph: ir.Graph | None, mask: ir.Value | None,
                    dtype: np.dtype, rank: int | None = None) -> ir.Value:
    """The mask as a 4-D attention_bias (leading 1s added), or a [1, 1, 1, 1] zero.

    `rank`: the mask's rank as the match traced it (a 4-D mask with dynamic dims is taken as
    is); None reads its static shape.
    """
    if mask is None:
        return _zeros(op, graph, (1, 1, 1, 1), dtype)
    if rank == 4:
        return mask
    shape = _static_shape(mask)
    assert shape is not None and len(shape) <= 4  # checked by the match
    return _as_shape(op, graph, mask, (1,) * (4 - len(shape)) + shape)


class PluginMultiHeadAttention(FuseMultiHeadAttention):
    """Head split → Q·Kᵀ·scale [+ mask] → Softmax → ·V → head merge → fuseforge.MHA."""

    def check(self, context: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
              probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> MatchResult:
        result = super().check(context, scores, value, out_shape, probs, ctx, merged, out)
        if not result:
            return result
        assert self._attention is not None  # parsed by the check above
        refusal = _refuse_head_sizes(self._attention.query.shape[3],
                                     self._attention.value.shape[3])
        return result if refusal is None else refusal

    def rewrite(self, op: Any, scores: ir.Value, value: ir.Value, out_shape: ir.Value,
                probs: ir.Value, ctx: ir.Value, merged: ir.Value, out: ir.Value) -> ir.Value:
        attention, graph = self._attention, out.graph
        assert attention is not None and probs.dtype is not None
        query, key, value_ = _merged_inputs(op, graph, attention)
        rank = None if attention.mask_dims is None else len(attention.mask_dims)
        bias = _attention_bias(op, graph, attention.mask, probs.dtype.numpy(), rank)
        _, _, heads, _ = attention.query.shape
        fused = op.MultiHeadAttention(
            query, key, value_, bias, _domain=DOMAIN,
            **MULTI_HEAD_ATTENTION.node_attributes(num_heads=heads, scale=attention.scale))
        return merged_output(op, graph, attention, fused)


# --- com.microsoft ops an ONNX Runtime-optimized model carries ------------------------------

def _refuse_unless_float(*values: ir.Value | None) -> MatchResult | None:
    for value in values:
        if value is not None and value.dtype is None:
            return MatchResult().fail(f"'{value.name}' has no known element type (run shape "
                                      "inference)")
        if value is not None and value.dtype not in _TYPES:
            return MatchResult().fail(
                f"'{value.name}' is {value.dtype}; the plugins are validated in float32 or "
                "float16")
    return None


def _static_hidden(value: ir.Value) -> int | MatchResult:
    if value.shape is None or not value.shape.dims or not isinstance(value.shape[-1], int):
        return MatchResult().fail(f"the last dim of '{value.name}' is not static "
                                  "(run shape inference)")
    return value.shape[-1]


def _last_dim(value: ir.Value) -> int:
    """The static last dim of a value the rule's check has accepted."""
    dim = value.shape[-1] if value.shape is not None else None
    assert isinstance(dim, int)
    return dim


def _refuse_unless_vector(value: ir.Value | None, hidden: int, what: str) -> MatchResult | None:
    if value is None:
        return None
    if value.shape is None or tuple(value.shape.dims) != (hidden,):
        return MatchResult().fail(f"{what} '{value.name}' has shape {value.shape}, expected "
                                  f"[{hidden}]")
    return None


class RetargetContribSkipLayerNorm(RewriteRuleClassBase):
    """com.microsoft.SkipLayerNormalization → fuseforge.SkipLayerNorm (same inputs, epsilon).

    `outputs` is how many outputs the node declares: 1, or 4 (the sum in the 4th; mean and
    inverse std, training outputs, unused).
    """

    def __init__(self, outputs: int) -> None:
        super().__init__(f"RetargetContribSkipLayerNorm{outputs}", remove_nodes=False)
        self.outputs = outputs

    def pattern(self, op: Any, input_: ir.Value, skip: ir.Value, gamma: ir.Value) -> Any:
        if self.outputs == 1:
            return op.SkipLayerNormalization(input_, skip, gamma, _domain=MS_DOMAIN,
                                             _allow_other_inputs=True,
                                             _allow_other_attributes=True,
                                             _outputs=["normalized"])
        normalized, _, _, total = op.SkipLayerNormalization(
            input_, skip, gamma, _domain=MS_DOMAIN, _allow_other_inputs=True,
            _allow_other_attributes=True, _outputs=["normalized", "mean", "inv_std", "total"])
        return normalized, total

    def check(self, context: Any, input_: ir.Value, skip: ir.Value, gamma: ir.Value,
              normalized: ir.Value, mean: ir.Value | None = None,
              inv_std: ir.Value | None = None, total: ir.Value | None = None) -> MatchResult:
        node = normalized.producer()
        assert node is not None
        beta, bias = (node.inputs[i] if len(node.inputs) > i else None for i in (3, 4))
        hidden = _static_hidden(input_)
        if isinstance(hidden, MatchResult):
            return hidden
        refusal = first_refusal(
            refuse_unknown_attributes(node, ("epsilon",)),
            lambda: refuse_if_intermediates_escape(context),
            lambda: _refuse_unless_float(input_, skip, gamma, beta, bias),
            lambda: None if input_.shape == skip.shape else MatchResult().fail(
                f"'{input_.name}' {input_.shape} and skip '{skip.name}' {skip.shape} differ "
                "in shape (the plugin does not broadcast skip)"),
            lambda: None if hidden <= MAX_HIDDEN else MatchResult().fail(
                f"hidden size {hidden} is above the SkipLayerNorm kernel's {MAX_HIDDEN}"),
            lambda: _refuse_unless_vector(gamma, hidden, "gamma"),
            lambda: _refuse_unless_vector(beta, hidden, "beta"),
            lambda: _refuse_unless_vector(bias, hidden, "bias"),
        )
        return MatchResult() if refusal is None else refusal

    def rewrite(self, op: Any, input_: ir.Value, skip: ir.Value, gamma: ir.Value,
                normalized: ir.Value, **_: Any) -> Any:
        node = normalized.producer()
        assert node is not None and input_.dtype is not None
        beta, bias = (node.inputs[i] if len(node.inputs) > i else None for i in (3, 4))
        return _skip_layer_norm(
            op, normalized.graph, input_, skip, gamma, beta, bias,
            attr_float(node, "epsilon", 1e-12),  # the contrib op's default
            keep_sum=self.outputs == 4,
            zeros_like=np.empty(_last_dim(input_), dtype=input_.dtype.numpy()))


class RetargetContribGelu(RewriteRuleClassBase):
    """com.microsoft.BiasGelu(x, b) / FastGelu(x[, b]) / Gelu(x) → fuseforge.BiasGelu.

    Without a bias the plugin gets a zero bias of x's (static) last size.
    """

    _APPROXIMATE = {"BiasGelu": "none", "Gelu": "none", "FastGelu": "tanh"}

    def __init__(self, source: str) -> None:
        super().__init__(f"RetargetContrib{source}", remove_nodes=False)
        self.source = source

    def pattern(self, op: Any, x: ir.Value) -> Any:
        return getattr(op, self.source)(x, _domain=MS_DOMAIN, _allow_other_inputs=True,
                                        _outputs=["activated"])

    def check(self, context: Any, x: ir.Value, activated: ir.Value) -> MatchResult:
        node = activated.producer()
        assert node is not None
        bias = node.inputs[1] if len(node.inputs) > 1 else None
        hidden = _static_hidden(x)
        if isinstance(hidden, MatchResult):
            return hidden
        refusal = first_refusal(
            refuse_unknown_attributes(node),
            lambda: _refuse_unless_float(x, bias),
            lambda: _refuse_unless_vector(bias, hidden, "bias"),
        )
        return MatchResult() if refusal is None else refusal

    def rewrite(self, op: Any, x: ir.Value, activated: ir.Value) -> Any:
        node = activated.producer()
        assert node is not None and x.dtype is not None
        bias = node.inputs[1] if len(node.inputs) > 1 else None
        if bias is None:
            bias = _zeros(op, activated.graph, (_last_dim(x),), x.dtype.numpy())
        return op.BiasGelu(x, bias, _domain=DOMAIN, **BIAS_GELU.node_attributes(
            approximate=self._APPROXIMATE[self.source]))


# Inputs of com.microsoft.MultiHeadAttention after value, by index; only attention_bias maps.
_MHA_UNSUPPORTED_INPUTS = {3: "bias (packed Q/K/V bias)", 4: "key_padding_mask",
                           6: "past_key", 7: "past_value", 8: "past_sequence_length",
                           9: "cache_indirection"}
_MHA_ATTENTION_BIAS = 5


class RetargetContribMultiHeadAttention(RewriteRuleClassBase):
    """com.microsoft.MultiHeadAttention(query, key, value[, attention_bias]), all 3-D →
    fuseforge.MultiHeadAttention (scale 0 means 1/√H, as the contrib op's)."""

    def __init__(self) -> None:
        super().__init__(remove_nodes=False)

    def pattern(self, op: Any, query: ir.Value, key: ir.Value, value: ir.Value) -> Any:
        return op.MultiHeadAttention(query, key, value, _domain=MS_DOMAIN,
                                     _allow_other_inputs=True, _allow_other_attributes=True,
                                     _outputs=["attended"])

    def check(self, context: Any, query: ir.Value, key: ir.Value, value: ir.Value,
              attended: ir.Value) -> MatchResult:
        node = attended.producer()
        assert node is not None
        for index, what in _MHA_UNSUPPORTED_INPUTS.items():
            if len(node.inputs) > index and node.inputs[index] is not None:
                return MatchResult().fail(f"{node_label(node)} has a {what} input; the plugin "
                                          "takes only query, key, value and attention_bias")
        refusal = first_refusal(
            refuse_unknown_attributes(node, ("num_heads", "scale", "mask_filter_value",
                                             "unidirectional")),
            lambda: None if attr_int(node, "unidirectional", 0) == 0 else MatchResult().fail(
                f"{node_label(node)} is unidirectional (causal); the plugin takes the mask "
                "as attention_bias only"),
            lambda: _refuse_unless_float(query, key, value, _mha_bias(node)),
        )
        if refusal is not None:
            return refusal
        shapes = [_static_shape(v) for v in (query, key, value)]
        num_heads = attr_int(node, "num_heads", 0)
        if any(s is None or len(s) != 3 for s in shapes) or num_heads < 1:
            return MatchResult().fail(
                f"query, key and value of {node_label(node)} must be 3-D [B, S, N*H] with "
                f"static shapes (packed or 4-D forms are not supported); got {shapes}")
        (_, _, hidden), (_, _, hidden_k), (_, _, hidden_v) = shapes  # type: ignore[misc]
        if hidden != hidden_k or hidden % num_heads or hidden_v % num_heads:
            return MatchResult().fail(f"hidden sizes {hidden}/{hidden_k}/{hidden_v} do not "
                                      f"split into num_heads={num_heads} equal heads")
        bias = _mha_bias(node)
        bias_shape = None if bias is None else _static_shape(bias)
        if bias is not None and (bias_shape is None or len(bias_shape) != 4):
            return MatchResult().fail(f"attention_bias '{bias.name}' is not 4-D with a static "
                                      f"shape (found {bias_shape})")
        refusal = _refuse_head_sizes(hidden // num_heads, hidden_v // num_heads)
        return MatchResult() if refusal is None else refusal

    def rewrite(self, op: Any, query: ir.Value, key: ir.Value, value: ir.Value,
                attended: ir.Value) -> Any:
        node = attended.producer()
        assert node is not None and query.dtype is not None
        num_heads = attr_int(node, "num_heads", 0)
        scale = attr_float(node, "scale", 0.0)
        if scale == 0.0:  # the contrib op's "default": 1/√(head size)
            scale = 1.0 / math.sqrt(_last_dim(query) // num_heads)
        bias = _attention_bias(op, attended.graph, _mha_bias(node), query.dtype.numpy())
        return op.MultiHeadAttention(
            query, key, value, bias, _domain=DOMAIN,
            **MULTI_HEAD_ATTENTION.node_attributes(num_heads=num_heads, scale=scale))


def _mha_bias(node: ir.Node) -> ir.Value | None:
    return node.inputs[_MHA_ATTENTION_BIAS] if len(node.inputs) > _MHA_ATTENTION_BIAS else None


def _rules() -> Sequence[Any]:
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
        RetargetContribSkipLayerNorm.rule(1),
        RetargetContribSkipLayerNorm.rule(4),
        RetargetContribGelu.rule("BiasGelu"),
        RetargetContribGelu.rule("FastGelu"),
        RetargetContribGelu.rule("Gelu"),
        RetargetContribMultiHeadAttention.rule(),
    ]


FUSE_TO_PLUGINS = FusionPass(
    name="fuse_to_plugins",
    summary="Rewrite Add + LayerNormalization, bias Add + GELU and scaled dot-product "
            "attention (written out, or as the com.microsoft ops) into fuseforge plugin nodes "
            "for TensorRT",
    stage="other",
    rules={"tensorrt": _rules()},
)
