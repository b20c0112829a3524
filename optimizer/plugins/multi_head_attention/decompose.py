"""fuseforge.MultiHeadAttention as standard ONNX ops, so ONNX Runtime can run it.

    Q  = Transpose(Reshape(query, [0, 0, N, -1]), [0, 2, 1, 3])          [B, N, S, H]
    Kᵀ = Transpose(Reshape(key,   [0, 0, N, -1]), [0, 2, 3, 1])          [B, N, H, T]
    V  = Transpose(Reshape(value, [0, 0, N, -1]), [0, 2, 1, 3])          [B, N, T, Hv]
    out = Reshape(Transpose(Softmax(MatMul(Q, Kᵀ) * scale + attention_bias, -1) @ V,
                            [0, 2, 1, 3]), [0, 0, -1])                   [B, S, N*Hv]
in the inputs' type (Reshape's 0 copies the dim, so dynamic B, S, T work).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from optimizer.errors import PassError
from optimizer.plugins.base import SubgraphBuilder

__all__ = ["decompose"]

_SPLIT = [0, 2, 1, 3]


def decompose(b: SubgraphBuilder, node: ir.Node) -> Sequence[ir.Value | None]:
    query, key, value, attention_bias = node.inputs
    num_heads = node.attributes["num_heads"].as_int()
    scale = node.attributes["scale"].as_float()
    dtype = query.dtype if query is not None else None
    if dtype is None:
        raise PassError(f"cannot decompose MultiHeadAttention '{node.name}': the type of its "
                        "query is unknown (run shape inference first)")
    split_shape = b.constant(np.array([0, 0, num_heads, -1], dtype=np.int64))

    def heads(x: ir.Value | None, perm: list[int]) -> ir.Value:
        return b.op("Transpose", [b.op("Reshape", [x, split_shape])], {"perm": perm})

    scores = b.op("MatMul", [heads(query, _SPLIT), heads(key, [0, 2, 3, 1])])
    scaled = b.op("Mul", [scores, b.constant(np.array(scale, dtype=dtype.numpy()))])
    weights = b.op("Softmax", [b.op("Add", [scaled, attention_bias])], {"axis": -1})
    context = b.op("MatMul", [weights, heads(value, _SPLIT)])
    merged = b.op("Transpose", [context], {"perm": _SPLIT})
    return [b.op("Reshape", [merged, b.constant(np.array([0, 0, -1], dtype=np.int64))])]
