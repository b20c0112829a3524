"""Retarget the com.microsoft ops of an ONNX Runtime-optimized model onto fuseforge plugin nodes.

An upload ONNX Runtime has already optimized carries contrib ops TensorRT's parser rejects ("No
importer registered for op: MultiHeadAttention"); the plugins compute the same functions:
- SkipLayerNormalization(input, skip, gamma[, beta[, bias]]) → fuseforge.SkipLayerNorm, same
  inputs and epsilon (the contrib default 1e-12 when absent); with 4 declared outputs the sum,
  its 4th, becomes the plugin's 2nd (mean and inverse std are training outputs, unused);
- BiasGelu(x, b) and Gelu(x) → fuseforge.BiasGelu("none"), FastGelu(x[, b]) → ("tanh"); a
  missing bias is a zero vector of x's last size;
- MultiHeadAttention(query, key, value[, attention_bias]) with separate 3-D query, key and value
  → fuseforge.MultiHeadAttention (scale 0 means 1/√H, as the contrib op's).

Safe only when the node has no attribute beyond those translated, its inputs are float32 or
float16 with known types, hidden sizes are static, gamma, beta and biases are [hidden] vectors,
skip has input's shape (the plugin does not broadcast it), and the sizes fit the kernels
(plugin_nodes.py). MultiHeadAttention must have no packed Q/K/V bias, key padding mask, past
key/value or cache input, must not be unidirectional (causal masking is given as
attention_bias only), needs static [B, S, N*H] shapes that split into num_heads equal heads,
and a 4-D static attention_bias.

These rules run in the fuse_to_plugins pass after its own, so a bias Add before a contrib op
has already been taken into a plugin node where it could be. Backends: "tensorrt" only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRule, RewriteRuleClassBase

from optimizer.passes.checks import (
    attr_float,
    attr_int,
    first_refusal,
    producer,
    refuse_if_intermediates_escape,
    refuse_unknown_attributes,
    static_shape,
)
from optimizer.passes.matching import MS_DOMAIN, node_label
from optimizer.passes.plugin_nodes import (
    attention_bias,
    bias_gelu_node,
    multi_head_attention_node,
    refuse_head_sizes,
    skip_layer_norm_node,
    zeros,
)
from optimizer.plugins.skip_layer_norm import MAX_HIDDEN

__all__ = [
    "RetargetContribGelu",
    "RetargetContribMultiHeadAttention",
    "RetargetContribSkipLayerNorm",
    "retarget_contrib_rules",
]

_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)  # what ONNX Runtime validates on the CPU


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


def _optional_input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


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
        node = producer(normalized)
        beta, bias = _optional_input(node, 3), _optional_input(node, 4)
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
        node = producer(normalized)
        assert input_.dtype is not None
        return skip_layer_norm_node(
            op, normalized.graph, input_, skip, gamma, _optional_input(node, 3),
            _optional_input(node, 4),
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
        node = producer(activated)
        bias = _optional_input(node, 1)
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
        bias = _optional_input(producer(activated), 1)
        assert x.dtype is not None
        if bias is None:
            bias = zeros(op, activated.graph, (_last_dim(x),), x.dtype.numpy())
        return bias_gelu_node(op, x, bias, self._APPROXIMATE[self.source])


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
        node = producer(attended)
        for index, what in _MHA_UNSUPPORTED_INPUTS.items():
            if _optional_input(node, index) is not None:
                return MatchResult().fail(f"{node_label(node)} has a {what} input; the plugin "
                                          "takes only query, key, value and attention_bias")
        bias = _optional_input(node, _MHA_ATTENTION_BIAS)
        refusal = first_refusal(
            refuse_unknown_attributes(node, ("num_heads", "scale", "mask_filter_value",
                                             "unidirectional")),
            lambda: None if attr_int(node, "unidirectional", 0) == 0 else MatchResult().fail(
                f"{node_label(node)} is unidirectional (causal); the plugin takes the mask "
                "as attention_bias only"),
            lambda: _refuse_unless_float(query, key, value, bias),
        )
        if refusal is not None:
            return refusal
        shapes = [static_shape(v) for v in (query, key, value)]
        num_heads = attr_int(node, "num_heads", 0)
        if any(s is None or len(s) != 3 for s in shapes) or num_heads < 1:
            return MatchResult().fail(
                f"query, key and value of {node_label(node)} must be 3-D [B, S, N*H] with "
                f"static shapes (packed or 4-D forms are not supported); got {shapes}")
        (_, _, hidden), (_, _, hidden_k), (_, _, hidden_v) = shapes  # type: ignore[misc]
        if hidden != hidden_k or hidden % num_heads or hidden_v % num_heads:
            return MatchResult().fail(f"hidden sizes {hidden}/{hidden_k}/{hidden_v} do not "
                                      f"split into num_heads={num_heads} equal heads")
        bias_shape = None if bias is None else static_shape(bias)
        if bias is not None and (bias_shape is None or len(bias_shape) != 4):
            return MatchResult().fail(f"attention_bias '{bias.name}' is not 4-D with a static "
                                      f"shape (found {bias_shape})")
        refusal = refuse_head_sizes(hidden // num_heads, hidden_v // num_heads)
        return MatchResult() if refusal is None else refusal

    def rewrite(self, op: Any, query: ir.Value, key: ir.Value, value: ir.Value,
                attended: ir.Value) -> Any:
        node = producer(attended)
        assert query.dtype is not None
        num_heads = attr_int(node, "num_heads", 0)
        scale = attr_float(node, "scale", 0.0)
        if scale == 0.0:  # the contrib op's "default": 1/√(head size)
            scale = 1.0 / math.sqrt(_last_dim(query) // num_heads)
        bias = attention_bias(op, attended.graph, _optional_input(node, _MHA_ATTENTION_BIAS),
                              query.dtype.numpy())
        return multi_head_attention_node(op, query, key, value, bias, num_heads=num_heads,
                                         scale=scale)


def retarget_contrib_rules() -> list[RewriteRule]:
    """The rules, for the fuse_to_plugins pass to run after its own."""
    return [
        RetargetContribSkipLayerNorm.rule(1),
        RetargetContribSkipLayerNorm.rule(4),
        RetargetContribGelu.rule("BiasGelu"),
        RetargetContribGelu.rule("FastGelu"),
        RetargetContribGelu.rule("Gelu"),
        RetargetContribMultiHeadAttention.rule(),
    ]
