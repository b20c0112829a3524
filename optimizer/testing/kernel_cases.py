"""Random inputs for each kernel with the numpy reference's answer for them.

Shared by the kernel tests (tests/gpu/test_*_kernel.py) and bench/plugins_gpu.py, so both check
the same thing; nothing here needs pytest. Inputs are drawn on the target device in float32 and
rounded to the dtype under test; the reference then runs in float32 on exactly those rounded
values, so the only differences left are the kernel's own (see kernel_checks.py's tolerances). No
parameter is an identity: gamma, beta, biases and masks are random.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from optimizer.testing.kernel_checks import reference

__all__ = [
    "ATTENTION_BIAS_KINDS",
    "attention_expected",
    "attention_inputs",
    "bias_gelu_expected",
    "bias_gelu_inputs",
    "skip_layer_norm_expected",
    "skip_layer_norm_inputs",
]

ATTENTION_BIAS_KINDS = ("none", "full", "key_padding", "left_padding", "causal", "per_head")


def _generator(device: str, seed: int) -> Any:
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def _as_numpy(tensors: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: t.float().cpu().numpy() for name, t in tensors.items()}


def skip_layer_norm_inputs(shape: tuple[int, ...], dtype: str, device: str,
                           seed: int = 0) -> dict[str, Any]:
    """input (non-zero mean), skip, gamma (around 1), beta and bias, of `dtype` on `device`."""
    import torch

    generator, hidden = _generator(device, seed), shape[-1]

    def normal(*size: int, scale: float = 1.0, shift: float = 0.0) -> Any:
        values = torch.randn(*size, generator=generator, device=device) * scale + shift
        return values.to(getattr(torch, dtype))

    return {"input": normal(*shape, scale=1.5, shift=0.3), "skip": normal(*shape),
            "gamma": normal(hidden, scale=0.5, shift=1.0), "beta": normal(hidden, scale=0.5),
            "bias": normal(hidden, scale=0.5)}


def skip_layer_norm_expected(tensors: dict[str, Any], *,
                             epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """The reference's (output, sum) in float32."""
    output, total = reference("skip_layer_norm").skip_layer_norm(**_as_numpy(tensors),
                                                                 epsilon=epsilon)
    return np.asarray(output), np.asarray(total)


def bias_gelu_inputs(shape: tuple[int, ...], dtype: str, device: str,
                     seed: int = 0) -> dict[str, Any]:
    """input (scale 3, and every 97th element swept over [-8, 8] for GELU's tails) and bias."""
    import torch

    generator = _generator(device, seed)
    values = torch.randn(*shape, generator=generator, device=device) * 3.0
    swept = values.view(-1)[::97]
    swept.copy_(torch.linspace(-8.0, 8.0, swept.numel(), device=device))
    bias = torch.randn(shape[-1], generator=generator, device=device) * 0.5
    as_dtype = getattr(torch, dtype)
    return {"input": values.to(as_dtype), "bias": bias.to(as_dtype)}


def bias_gelu_expected(tensors: dict[str, Any], *, approximate: str) -> np.ndarray:
    (output,) = reference("bias_gelu").bias_gelu(**_as_numpy(tensors), approximate=approximate)
    return np.asarray(output)


def attention_bias(kind: str, batch: int, heads: int, seq_q: int, seq_kv: int,
                   generator: Any, device: str) -> Any:
    """A float32 attention_bias of layout `kind` (ATTENTION_BIAS_KINDS): random values, -inf
    where masked. "left_padding" masks the first 70 keys of batch 0 (more than a 64-key block)."""
    import torch

    shapes = {"none": (1, 1, 1, 1), "full": (batch, heads, seq_q, seq_kv),
              "key_padding": (batch, 1, 1, seq_kv), "left_padding": (batch, 1, 1, seq_kv),
              "causal": (1, 1, seq_q, seq_kv), "per_head": (1, heads, seq_q, seq_kv)}
    if kind == "none":
        return torch.zeros(shapes[kind], device=device)
    values = torch.randn(*shapes[kind], generator=generator, device=device)
    if kind == "key_padding":
        values[-1, ..., seq_kv - seq_kv // 3:] = float("-inf")
    elif kind == "left_padding":
        values[0, ..., :70] = float("-inf")
    elif kind == "causal":  # query i sees keys up to i + (T - S)
        above = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=device)
        values[0, 0][above.triu(seq_kv - seq_q + 1)] = float("-inf")
    return values


def attention_inputs(batch: int, seq_q: int, seq_kv: int, num_heads: int, head_size: int,
                     head_size_v: int, bias: str, *, dtype: str, device: str,
                     seed: int = 0) -> dict[str, Any]:
    """query [B, S, N*H], key [B, T, N*H], value [B, T, N*Hv] and an attention_bias."""
    import torch

    generator = _generator(device, seed)

    def normal(*size: int) -> Any:
        return torch.randn(*size, generator=generator, device=device)

    tensors = {"query": normal(batch, seq_q, num_heads * head_size),
               "key": normal(batch, seq_kv, num_heads * head_size),
               "value": normal(batch, seq_kv, num_heads * head_size_v),
               "attention_bias": attention_bias(bias, batch, num_heads, seq_q, seq_kv,
                                                generator, device)}
    return {name: t.to(getattr(torch, dtype)) for name, t in tensors.items()}


def attention_expected(tensors: dict[str, Any], *, num_heads: int,
                       scale: float) -> np.ndarray:
    (output,) = reference("multi_head_attention").multi_head_attention(
        **_as_numpy(tensors), num_heads=num_heads, scale=scale)
    return np.asarray(output)
