"""Triton kernel of fuseforge.SkipLayerNorm: one program normalizes one row of the hidden axis.

Imported only where Triton is installed (the TensorRT registration compiles it ahead of time,
the GPU benchmark launches it); nothing else imports this module. Its numpy equivalent is
reference.skip_layer_norm: the row is loaded once, summed in float32
(s = x + skip + bias), and the mean, the variance of the centred sum and the output are
computed from registers, so each tensor crosses memory once: read input and skip, write the
output (and the sum when STORE_SUM).

Argument order is what TensorRT's AOT launcher passes: input pointers, the int32 extra
arguments, output pointers; the constexprs are compiled in.
"""
# mypy: ignore-errors
# (Triton's DSL: its compiler checks it on the GPU; mypy has no types for it.)

import triton
import triton.language as tl


@triton.jit
def skip_layer_norm_kernel(
    X, SKIP, GAMMA, BETA, BIAS,  # inputs
    n_cols,  # int32 extra argument: the hidden size
    OUT, SUM,  # outputs
    EPS: tl.constexpr,
    BLOCK: tl.constexpr,  # next power of two >= n_cols
    STORE_SUM: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offsets = row * n_cols + cols
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    skip = tl.load(SKIP + offsets, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(BIAS + cols, mask=mask, other=0.0).to(tl.float32)
    total = x + skip + bias
    if STORE_SUM:
        tl.store(SUM + offsets, total.to(SUM.dtype.element_ty), mask=mask)
    mean = tl.sum(total, axis=0) / n_cols
    centred = tl.where(mask, total - mean, 0.0)
    variance = tl.sum(centred * centred, axis=0) / n_cols
    inv_std = 1.0 / tl.sqrt(variance + EPS)
    gamma = tl.load(GAMMA + cols, mask=mask, other=0.0).to(tl.float32)
    beta = tl.load(BETA + cols, mask=mask, other=0.0).to(tl.float32)
    output = centred * inv_std * gamma + beta
    tl.store(OUT + offsets, output.to(OUT.dtype.element_ty), mask=mask)

