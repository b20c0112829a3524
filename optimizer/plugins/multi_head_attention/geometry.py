"""How the MultiHeadAttention kernel is launched: its head-size limit, tile sizes, compiled-in
constants, warps, and the attention bias's broadcast strides.

One definition for the two launchers: trt_registration.py (TensorRT's AOT build) imports it, and
optimizer/testing/triton_launch.py (the GPU checks) loads this file by path, so a GPU test runs
the kernel with the geometry engines are built with. Standard library only, importing nothing of
the optimizer: it loads on a GPU machine that has only numpy, torch and triton (the package's
__init__ needs onnx).
"""

from __future__ import annotations

__all__ = ["MAX_HEAD_SIZE", "NUM_WARPS", "bias_strides", "kernel_constexprs", "tiles"]

MAX_HEAD_SIZE = 256  # the Q, K and V tiles of one head must fit one program's shared memory
NUM_WARPS = 4


def tiles(head_size: int, head_size_v: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DV): head dims padded to a power of two (>= 16 for
    tl.dot), and query/key blocks small enough that the Q, K, V tiles stay in shared memory and
    registers.

    Raises:
        ValueError: a head size outside 1..MAX_HEAD_SIZE.
    """
    if not 1 <= min(head_size, head_size_v) <= max(head_size, head_size_v) <= MAX_HEAD_SIZE:
        raise ValueError(f"MultiHeadAttention head sizes {head_size}/{head_size_v} are outside "
                         f"the kernel's 1..{MAX_HEAD_SIZE}")
    block_d, block_dv = (max(16, 1 << (h - 1).bit_length()) for h in (head_size, head_size_v))
    widest = max(block_d, block_dv)
    block_m, block_n = (64, 64) if widest <= 64 else (64, 32) if widest <= 128 else (32, 32)
    return block_m, block_n, block_d, block_dv


def kernel_constexprs(*, num_heads: int, head_size: int, head_size_v: int, scale: float,
                      float32: bool) -> dict[str, int | float | bool | str]:
    """What the kernel is compiled for; IEEE dot products for float32 (no TF32). See tiles()
    for what it raises."""
    block_m, block_n, block_d, block_dv = tiles(head_size, head_size_v)
    return {"NUM_HEADS": num_heads, "HEAD_DIM": head_size, "HEAD_DIM_V": head_size_v,
            "SCALE": scale, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d,
            "BLOCK_DV": block_dv, "DOT_PRECISION": "ieee" if float32 else "tf32"}


def bias_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides (in elements) of a contiguous 4-D bias, 0 along its size-1 (broadcast) dims.

    >>> bias_strides((2, 1, 8, 16))
    (128, 0, 16, 1)
    """
    strides, later = [], 1
    for dim in reversed(shape):
        strides.append(0 if dim == 1 else later)
        later *= dim
    return tuple(reversed(strides))
