"""Triton kernel of fuseforge.BiasGelu: one program per BLOCK elements of the flat tensor.

Imported only where Triton is installed (the TensorRT registration compiles it ahead of time,
the GPU benchmark launches it); nothing else imports this module. Its numpy equivalent is
reference.bias_gelu: x = input + bias[i % H] in float32, then GELU, stored in the output type;
the tanh form is written x * sigmoid(2u) (= 0.5 * x * (1 + tanh(u))), Triton having sigmoid
but no portable tanh. Each tensor crosses memory once (the bias stays in cache). Full blocks
are loaded and stored without a mask, so given aligned pointers the accesses vectorize.

Argument order is what TensorRT's AOT launcher passes: input pointers, the int32 extra
arguments, output pointers; the constexprs are compiled in.
"""
# mypy: ignore-errors
# (Triton's DSL: its compiler checks it on the GPU; mypy has no types for it.)

import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(
    X, BIAS,  # inputs
    n_elements, n_cols,  # int32 extra arguments: input numel and its last size
    OUT,  # output
    APPROXIMATE_TANH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    # Each element's bias column without a 64-bit modulo per element (emulated on the GPU, it
    # costs more than the element's memory traffic): one per program, then a block no wider
    # than a row wraps at most once; narrower rows take a 32-bit modulo.
    cols = (start % n_cols).to(tl.int32) + tl.arange(0, BLOCK)
    if n_cols >= BLOCK:
        cols = tl.where(cols >= n_cols, cols - n_cols, cols)
    else:
        cols = cols % n_cols
    mask = offsets < n_elements
    full = start + BLOCK <= n_elements  # every block but the last: no mask, so it vectorizes
    if full:
        x = tl.load(X + offsets).to(tl.float32)
    else:
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    x += tl.load(BIAS + cols).to(tl.float32)  # cols < n_cols even where the mask is off
    if APPROXIMATE_TANH:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # √(2/π)(x + 0.044715 x³)
        y = x * tl.sigmoid(2.0 * inner)
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))  # x / √2
    if full:
        tl.store(OUT + offsets, y.to(OUT.dtype.element_ty))
    else:
        tl.store(OUT + offsets, y.to(OUT.dtype.element_ty), mask=mask)
