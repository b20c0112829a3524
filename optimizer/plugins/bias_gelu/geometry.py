"""How the BiasGelu kernel is launched: BLOCK elements per program, its warps, and the
compiled-in constants.

One definition for the two launchers: trt_registration.py (TensorRT's AOT build) imports it, and
optimizer/testing/triton_launch.py (the GPU checks) loads this file by path. Standard library
only, importing nothing of the optimizer: it loads on a GPU machine that has only numpy, torch
and triton (the package's __init__ needs onnx). Both launchers check `approximate` first.
"""

from __future__ import annotations

__all__ = ["BLOCK", "NUM_WARPS", "kernel_constexprs"]

BLOCK = 1024  # elements per program: 4 warps, 8 per thread
NUM_WARPS = 4


def kernel_constexprs(approximate: str) -> dict[str, int | float | bool | str]:
    """What the kernel is compiled for: the tanh approximation or erf, and BLOCK."""
    return {"APPROXIMATE_TANH": approximate == "tanh", "BLOCK": BLOCK}
