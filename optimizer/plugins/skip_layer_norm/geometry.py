"""How the SkipLayerNorm kernel is launched: one program per row, its hidden-size limit, the
compiled-in constants and the warps per row.

One definition for the two launchers: trt_registration.py (TensorRT's AOT build) imports it, and
optimizer/testing/triton_launch.py (the GPU checks) loads this file by path. Standard library
only, importing nothing of the optimizer: it loads on a GPU machine that has only numpy, torch
and triton (the package's __init__ needs onnx).
"""

from __future__ import annotations

__all__ = ["MAX_HIDDEN", "kernel_constexprs", "row_warps"]

MAX_HIDDEN = 16384  # one row is one Triton program; beyond this it would spill registers


def row_warps(block: int) -> int:
    """Warps per row so each thread holds at most ~8 values of the row (1024 -> 4 warps)."""
    return max(1, min(16, block // 256))


def kernel_constexprs(hidden: int, epsilon: float, *,
                      store_sum: bool = True) -> dict[str, int | float | bool | str]:
    """What the kernel is compiled for: BLOCK the next power of two >= hidden. TensorRT gives
    the plugin both outputs even when the node omits the sum, so its builds store it.

    Raises:
        ValueError: the hidden size is outside 1..MAX_HIDDEN.
    """
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"SkipLayerNorm hidden size {hidden} is outside the kernel's "
                         f"1..{MAX_HIDDEN} (one row is one program)")
    return {"EPS": epsilon, "BLOCK": 1 << (hidden - 1).bit_length(), "STORE_SUM": store_sum}
