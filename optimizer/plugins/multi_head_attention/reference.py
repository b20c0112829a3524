"""The numpy ground truth of fuseforge.MultiHeadAttention.

For query [B, S, N*H], key [B, T, N*H], value [B, T, N*Hv] and attention_bias broadcasting to
[B, N, S, T], per batch b and head n (Q, K, V: the head's slice of the last axis):
    out[b, :, n*Hv:(n+1)*Hv] = softmax(scale * Q Kᵀ + attention_bias[b, n], axis=-1) V
computed in float32 and returned in the inputs' type.
"""

from __future__ import annotations

import numpy as np

__all__ = ["head_sizes", "multi_head_attention", "split_heads"]


def head_sizes(query: np.ndarray, value: np.ndarray, num_heads: int) -> tuple[int, int]:
    """(H, Hv): the per-head sizes of query/key and of value.

    Raises:
        ValueError: a hidden size is not a multiple of `num_heads`.
    """
    if query.shape[-1] % num_heads or value.shape[-1] % num_heads:
        raise ValueError(f"hidden sizes {query.shape[-1]} and {value.shape[-1]} are not "
                         f"multiples of num_heads={num_heads}")
    return query.shape[-1] // num_heads, value.shape[-1] // num_heads


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """[B, S, N*H] → [B, N, S, H] (a view of the same row-major data)."""
    batch, seq, hidden = x.shape
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def multi_head_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                         attention_bias: np.ndarray, *, num_heads: int,
                         scale: float) -> tuple[np.ndarray]:
    """(output,): output [B, S, N*Hv] in query's type."""
    head_sizes(query, value, num_heads)
    q = split_heads(query.astype(np.float32), num_heads)
    k = split_heads(key.astype(np.float32), num_heads)
    v = split_heads(value.astype(np.float32), num_heads)
    scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(scale) + attention_bias.astype(np.float32)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    context = weights @ v  # [B, N, S, Hv]
    batch, _, seq, _ = context.shape
    return (context.transpose(0, 2, 1, 3).reshape(batch, seq, -1).astype(query.dtype),)
