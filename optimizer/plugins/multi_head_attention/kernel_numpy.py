"""kernel.multi_head_attention_kernel transcribed to numpy, block for block.

The kernel cannot run without a GPU, so its algorithm is kept here in numpy and tested against
reference.multi_head_attention on the CPU: each program takes BLOCK_M query rows of one (batch,
head), walks the keys BLOCK_N at a time, and keeps a running maximum m, a running sum l and an
unnormalized output acc (the online softmax of FlashAttention):
    s = scale * q kᵀ + bias;  m' = max(m, rowmax(s));  p = exp(s - m');  α = exp(m - m')
    l = l α + rowsum(p);  acc = acc α + p v;  m = m'         ...  out = acc / l
Products are accumulated in float32 and p is rounded to the value type before p v, as the
kernel's tl.dot does.
"""

from __future__ import annotations

import numpy as np

from optimizer.plugins.multi_head_attention.reference import head_sizes, split_heads

__all__ = ["blockwise_attention"]


def blockwise_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                        attention_bias: np.ndarray, *, num_heads: int, scale: float,
                        block_m: int = 64, block_n: int = 64) -> np.ndarray:
    """The kernel's output [B, S, N*Hv], in query's type."""
    head_sizes(query, value, num_heads)
    q_heads, k_heads, v_heads = (split_heads(x, num_heads) for x in (query, key, value))
    batch, _, seq_q, _ = q_heads.shape
    seq_kv, head_size_v = k_heads.shape[2], v_heads.shape[3]
    bias = np.broadcast_to(attention_bias, (batch, num_heads, seq_q, seq_kv))
    out = np.empty((batch, num_heads, seq_q, head_size_v), dtype=np.float32)
    for b in range(batch):
        for n in range(num_heads):
            for start_m in range(0, seq_q, block_m):
                rows = slice(start_m, min(start_m + block_m, seq_q))
                q = q_heads[b, n, rows].astype(np.float32)
                m = np.full(q.shape[0], -np.inf, dtype=np.float32)
                total = np.zeros(q.shape[0], dtype=np.float32)
                acc = np.zeros((q.shape[0], head_size_v), dtype=np.float32)
                for start_n in range(0, seq_kv, block_n):
                    cols = slice(start_n, min(start_n + block_n, seq_kv))
                    k = k_heads[b, n, cols].astype(np.float32)
                    v = v_heads[b, n, cols]
                    s = (q @ k.T) * np.float32(scale) + bias[b, n, rows, cols].astype(np.float32)
                    m_new = np.maximum(m, s.max(axis=1))
                    # While a row has seen only -inf (a masked block, e.g. left padding),
                    # exp(-inf - -inf) would be NaN: subtract 0 instead, as the kernel does.
                    m_safe = np.where(m_new == -np.inf, np.float32(0), m_new)
                    p = np.exp(s - m_safe[:, None])
                    alpha = np.exp(m - m_safe)
                    total = total * alpha + p.sum(axis=1)
                    p_rounded = p.astype(value.dtype).astype(np.float32)
                    acc = acc * alpha[:, None] + p_rounded @ v.astype(np.float32)
                    m = m_new
                out[b, n, rows] = acc / total[:, None]
    return out.transpose(0, 2, 1, 3).reshape(batch, seq_q, -1).astype(query.dtype)
