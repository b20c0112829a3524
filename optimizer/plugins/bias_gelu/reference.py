"""The numpy ground truth of fuseforge.BiasGelu.

    x = input + bias                                                (in float32)
    approximate "none":  y = 0.5 * x * (1 + erf(x / √2))
    approximate "tanh":  y = 0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³)))
GELU is evaluated in float64 and rounded to the input's type. The Triton kernel computes the
same per element in float32 (the tanh form as x * sigmoid(2u), which is 0.5 * x * (1 + tanh(u))),
so this is also its numpy equivalent, to float32 rounding.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["APPROXIMATIONS", "bias_gelu", "erf"]

APPROXIMATIONS = ("none", "tanh")  # as the Gelu-20 op names them

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """Element-wise erf in float64 (numpy has none; math.erf is exact to double precision)."""
    return np.asarray(np.vectorize(math.erf, otypes=[np.float64])(x), dtype=np.float64)


def bias_gelu(input: np.ndarray, bias: np.ndarray, *, approximate: str) -> tuple[np.ndarray]:
    """(output,) for `input` [..., H] and `bias` [H] of one float type.

    Raises:
        ValueError: `approximate` is neither "none" nor "tanh".
    """
    x = input.astype(np.float32) + bias.astype(np.float32)
    if approximate == "none":
        y = 0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))
    elif approximate == "tanh":
        wide = x.astype(np.float64)
        y = 0.5 * wide * (1.0 + np.tanh(_SQRT_2_OVER_PI * (wide + 0.044715 * wide**3)))
    else:
        raise ValueError(f"approximate must be one of {APPROXIMATIONS}, got {approximate!r}")
    return (y.astype(input.dtype),)
