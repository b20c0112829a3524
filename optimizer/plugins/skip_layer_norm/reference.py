"""The numpy ground truth of fuseforge.SkipLayerNorm.

    s = input + skip + bias                     (in float32)
    y = (s - mean(s)) / sqrt(var(s) + epsilon) * gamma + beta     over the last axis
Both y and s are returned in the inputs' type. The Triton kernel computes exactly this per row
(float32 sum, mean, then the variance of the centred sum), so this is also its numpy
equivalent.
"""

from __future__ import annotations

import numpy as np

__all__ = ["skip_layer_norm"]


def skip_layer_norm(input: np.ndarray, skip: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                    bias: np.ndarray, *, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(output, input_skip_bias_sum) for inputs of one float type; gamma, beta, bias: (H,)."""
    total = (input.astype(np.float32) + skip.astype(np.float32)) + bias.astype(np.float32)
    mean = total.mean(axis=-1, keepdims=True)
    centred = total - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    normalized = centred / np.sqrt(variance + np.float32(epsilon))
    output = normalized * gamma.astype(np.float32) + beta.astype(np.float32)
    return output.astype(input.dtype), total.astype(input.dtype)
