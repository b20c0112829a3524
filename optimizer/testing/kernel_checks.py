"""Judge a Triton kernel's output against its plugin's numpy reference, within stated tolerances.

For the kernel tests (tests/gpu/) and bench/plugins_gpu.py. Like the launch layer
(triton_launch.py), this module imports no optimizer module outside optimizer.testing (the
plugins package needs onnx and onnx_ir, and the GPU machines that run these checks may have only
numpy, torch and triton) and reads each reference.py by path; nothing here imports torch, triton
or pytest at module level, so the suite collects without torch.

Tolerances, per output dtype, for a kernel output against the numpy reference computed in
float32 (float64 for GELU) from the same dtype-rounded inputs:
    |kernel - reference| <= atol + rtol * |reference|
- rtol = 2u, u the dtype's unit roundoff (float16 2^-11, bfloat16 2^-8): the kernel rounds its
  float32 result to the dtype once (at most u relative), and its float32 arithmetic differs
  from numpy's only in summation order and the GPU's approximate exp/sqrt/erf (~1e-6 relative),
  which the second u absorbs. float32 has u = 2^-24, so that noise sets it: 1e-5.
- atol = 1e-5: the same float32 noise on outputs that cancel to near zero (beta + gamma * n,
  GELU's tail 0.5 x (1 + erf) where 1 + erf cancels).
Attention adds u * max|value| to atol (attention_atol): the kernel rounds the softmax weights
to the value dtype before P V (as FlashAttention does), so each output moves by at most
u * sum(p |v|) / sum(p) <= u * max|v|.
Triton's interpreter rounds float32 to bfloat16 toward zero (its cast_impl passes no rounding
mode; the GPU rounds to nearest even), up to 2u instead of u: tolerance() adds u for it.
A kernel bug (a wrong index, a missed mask, an unnormalized row) moves outputs by O(1).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from optimizer.testing import triton_launch

__all__ = [
    "DTYPES",
    "TOLERANCES",
    "assert_matches",
    "attention_atol",
    "mismatch",
    "reference",
    "tolerance",
]

DTYPES = ("float32", "float16", "bfloat16")

# (rtol, atol) per output dtype, argued above.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "float16": (2 * 2.0**-11, 1e-5),
    "bfloat16": (2 * 2.0**-8, 1e-5),
}


def reference(plugin: str) -> ModuleType:
    """optimizer/plugins/<plugin>/reference.py, the numpy ground truth, loaded by path."""
    return triton_launch.load_plugin_file(plugin, "reference")


def tolerance(dtype: str, device: str) -> tuple[float, float]:
    """(rtol, atol) for outputs of `dtype` computed on `device` ("cpu": the interpreter)."""
    rtol, atol = TOLERANCES[dtype]
    if device == "cpu" and dtype == "bfloat16":
        rtol += 2.0**-8  # the interpreter's round-toward-zero (see above)
    return rtol, atol


def attention_atol(dtype: str, value: Any) -> float:
    """TOLERANCES' atol plus the softmax weights' rounding to the value dtype (see above)."""
    rtol, atol = TOLERANCES[dtype]
    return atol + rtol / 2 * float(np.abs(value).max())  # rtol / 2 = u


def mismatch(what: str, kernel_output: Any, expected: np.ndarray, dtype: str, *,
             atol: float | None = None) -> str | None:
    """Why a kernel output (a torch tensor) is not within tolerance(dtype, its device) of
    `expected`, naming the worst element; None when it is. NaN must meet NaN."""
    actual = kernel_output.detach().float().cpu().numpy()
    rtol, default_atol = tolerance(dtype, kernel_output.device.type)
    atol = default_atol if atol is None else atol
    if actual.shape != expected.shape:
        return f"{what}: shape {actual.shape}, expected {expected.shape}"
    expected = expected.astype(np.float32)
    nan_differs = np.isnan(actual) != np.isnan(expected)
    if nan_differs.any():
        return (f"{what}: NaN at {np.argwhere(nan_differs)[:5].tolist()} in one of kernel and "
                "reference only")
    error = np.nan_to_num(np.abs(actual - expected) - rtol * np.abs(expected), nan=0.0)
    worst = np.unravel_index(int(np.argmax(error)), error.shape)
    if error[worst] <= atol:
        return None
    return (f"{what}: kernel {actual[worst]} vs reference {expected[worst]} at "
            f"{tuple(map(int, worst))} differs by {abs(actual[worst] - expected[worst]):.3g}, "
            f"over atol {atol:.3g} + rtol {rtol:.3g} * |reference| ({dtype})")


def assert_matches(what: str, kernel_output: Any, expected: np.ndarray, dtype: str, *,
                   atol: float | None = None) -> None:
    """Assert that mismatch() finds nothing."""
    problem = mismatch(what, kernel_output, expected, dtype, atol=atol)
    assert problem is None, problem
