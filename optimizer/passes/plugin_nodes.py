"""Write fuseforge plugin nodes the same way in every plugin rule, within the kernels' limits.

Shared by fuse_to_plugins.py (written-out subgraphs) and retarget_contrib_ops.py (com.microsoft
ops): each plugin node gets every attribute TensorRT's parser needs (Plugin.node_attributes), a
missing beta or bias becomes a zero constant (one per shape and type, shared by every layer), a
mask becomes the 4-D attention_bias the MultiHeadAttention kernel takes, and head sizes above
that kernel's limit are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult

from optimizer.passes.checks import shared_constant, static_shape
from optimizer.passes.fuse_attention import as_shape
from optimizer.plugins import DOMAIN
from optimizer.plugins.bias_gelu import PLUGIN as BIAS_GELU
from optimizer.plugins.multi_head_attention import MAX_HEAD_SIZE
from optimizer.plugins.multi_head_attention import PLUGIN as MULTI_HEAD_ATTENTION
from optimizer.plugins.skip_layer_norm import PLUGIN as SKIP_LAYER_NORM

__all__ = [
    "attention_bias",
    "bias_gelu_node",
    "multi_head_attention_node",
    "refuse_head_sizes",
    "skip_layer_norm_node",
    "zeros",
]


def zeros(op: Any, graph: ir.Graph | None, shape: tuple[int, ...], dtype: np.dtype) -> ir.Value:
    """A zero constant, one per shape and type in the graph (every layer shares it)."""
    name = f"fuseforge_zeros_{'x'.join(map(str, shape))}_{dtype.name}"
    return shared_constant(op, graph, name, np.zeros(shape, dtype))


def skip_layer_norm_node(op: Any, graph: ir.Graph | None, input_: ir.Value, skip: ir.Value,
                         gamma: ir.Value, beta: ir.Value | None, bias: ir.Value | None,
                         epsilon: float, *, keep_sum: bool, zeros_like: np.ndarray) -> Any:
    """The SkipLayerNorm node (with the sum as 2nd output when `keep_sum`); a missing beta or
    bias is a zero vector shaped and typed `zeros_like`."""
    if beta is None or bias is None:  # one constant for both: it joins the graph after rewrite
        zero = zeros(op, graph, zeros_like.shape, zeros_like.dtype)
        beta = zero if beta is None else beta
        bias = zero if bias is None else bias
    attributes = SKIP_LAYER_NORM.node_attributes(epsilon=epsilon)
    if not keep_sum:
        return op.SkipLayerNorm(input_, skip, gamma, beta, bias, _domain=DOMAIN, **attributes)
    output, total = op.SkipLayerNorm(input_, skip, gamma, beta, bias, _domain=DOMAIN,
                                     _outputs=2, **attributes)
    return output, total


def bias_gelu_node(op: Any, x: ir.Value, bias: ir.Value, approximate: str) -> Any:
    """The BiasGelu node: GELU(x + bias), erf form ("none") or tanh approximation ("tanh")."""
    return op.BiasGelu(x, bias, _domain=DOMAIN,
                       **BIAS_GELU.node_attributes(approximate=approximate))


def multi_head_attention_node(op: Any, query: ir.Value, key: ir.Value, value: ir.Value,
                              bias: ir.Value, *, num_heads: int, scale: float) -> Any:
    """The MultiHeadAttention node on 3-D [B, S, N*H] query, key, value and a 4-D bias."""
    return op.MultiHeadAttention(
        query, key, value, bias, _domain=DOMAIN,
        **MULTI_HEAD_ATTENTION.node_attributes(num_heads=num_heads, scale=scale))


def refuse_head_sizes(head_size: int, head_size_v: int) -> MatchResult | None:
    """Q/K and V head sizes must be within the MultiHeadAttention kernel's limit."""
    if max(head_size, head_size_v) > MAX_HEAD_SIZE:
        return MatchResult().fail(f"head sizes {head_size}/{head_size_v} are above the "
                                  f"MultiHeadAttention kernel's {MAX_HEAD_SIZE}")
    return None


def attention_bias(op: Any, graph: ir.Graph | None, mask: ir.Value | None,
                   dtype: np.dtype, rank: int | None = None) -> ir.Value:
    """The mask as a 4-D attention_bias (leading 1s added), or a [1, 1, 1, 1] zero.

    `rank`: the mask's rank as the match traced it (a 4-D mask with dynamic dims is taken as
    is); None reads its static shape.
    """
    if mask is None:
        return zeros(op, graph, (1, 1, 1, 1), dtype)
    if rank == 4:
        return mask
    shape = static_shape(mask)
    assert shape is not None and len(shape) <= 4  # checked by the match
    return as_shape(op, graph, mask, (1,) * (4 - len(shape)) + shape)
