"""Triton kernel of fuseforge.MultiHeadAttention: FlashAttention's forward pass.

Imported only where Triton is installed (the TensorRT registration compiles it ahead of time,
the GPU checks launch it); nothing else imports this module. Its numpy transcription, block
for block, is kernel_numpy.blockwise_attention; tests/gpu runs the kernel itself against
reference.py (compiled on a GPU, through Triton's interpreter on the CPU).

Program (pid_m, pid_bh) computes BLOCK_M query rows of batch pid_bh // N, head pid_bh % N,
reading Q, K, V straight from the [B, S, N*H] layout (no head split in memory): it walks the
keys BLOCK_N at a time with the online softmax, so the [S, T] score matrix never reaches
memory. attention_bias is read through strides; a broadcast dim has stride 0.

Argument order is what TensorRT's AOT launcher passes: input pointers, the int32 extra
arguments, output pointers; the constexprs are compiled in.
"""
# mypy: ignore-errors
# (Triton's DSL: its compiler checks it on the GPU; mypy has no types for it.)

import triton
import triton.language as tl


@triton.jit
def multi_head_attention_kernel(
    Q, K, V, BIAS,  # inputs
    seq_q, seq_kv,  # int32 extra arguments: S and T,
    bias_stride_b, bias_stride_n, bias_stride_s, bias_stride_t,  # and the bias strides
    OUT,  # output
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,  # next power of two >= HEAD_DIM (>= 16, tl.dot's minimum)
    BLOCK_DV: tl.constexpr,  # likewise for HEAD_DIM_V
    DOT_PRECISION: tl.constexpr,  # "ieee" for float32 inputs (no TF32 rounding)
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = (pid_bh // NUM_HEADS).to(tl.int64)
    head = pid_bh % NUM_HEADS
    qk_row = NUM_HEADS * HEAD_DIM  # elements from one token to the next in Q and K
    v_row = NUM_HEADS * HEAD_DIM_V
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = offs_m < seq_q
    q = tl.load(Q + (batch * seq_q + offs_m[:, None]) * qk_row + head * HEAD_DIM + offs_d[None, :],
                mask=rows[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)
    bias_rows = (BIAS + batch * bias_stride_b + head * bias_stride_n
                 + offs_m[:, None] * bias_stride_s)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    for start_n in range(0, seq_kv, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols = offs_n < seq_kv
        k = tl.load(K + (batch * seq_kv + offs_n[None, :]) * qk_row + head * HEAD_DIM
                    + offs_d[:, None],
                    mask=cols[None, :] & (offs_d[:, None] < HEAD_DIM), other=0.0)  # Kᵀ tile
        scores = tl.dot(q, k, input_precision=DOT_PRECISION) * SCALE
        scores += tl.load(bias_rows + offs_n[None, :] * bias_stride_t,
                          mask=rows[:, None] & cols[None, :], other=0.0).to(tl.float32)
        scores = tl.where(cols[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        # While every key so far is masked (-inf) the maximum is -inf too: subtract 0 then, so
        # p and alpha are exp(-inf) = 0, not exp(-inf + inf) = NaN (left padding, a whole
        # block masked). A row masked everywhere still ends as 0 / 0 = NaN, as Softmax does.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(scores - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + (batch * seq_kv + offs_n[:, None]) * v_row + head * HEAD_DIM_V
                    + offs_dv[None, :],
                    mask=cols[:, None] & (offs_dv[None, :] < HEAD_DIM_V), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(OUT + (batch * seq_q + offs_m[:, None]) * v_row + head * HEAD_DIM_V
             + offs_dv[None, :],
             acc.to(OUT.dtype.element_ty), mask=rows[:, None] & (offs_dv[None, :] < HEAD_DIM_V))
