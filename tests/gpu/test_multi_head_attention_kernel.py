"""MultiHeadAttention's Triton kernel against reference.multi_head_attention.

Cases cover ragged query and key tiles (S, T not multiples of BLOCK_M/BLOCK_N), head sizes that
are not powers of two, a value head size unlike the query's, the three tile configurations
(head <= 64, <= 128, <= 256), and every bias layout the contract allows: none, per batch (key
padding), per head, per query (causal) and full; masks are -inf. Left padding that masks a whole
block of keys was the kernel's first bug: exp(-inf - (-inf)) = NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from optimizer.testing.kernel_cases import attention_expected, attention_inputs
from optimizer.testing.kernel_checks import DTYPES, assert_matches, attention_atol

# name: (batch, seq_q, seq_kv, num_heads, head_size, head_size_v, bias)
CASES = {
    "ragged-no-mask": (2, 37, 77, 3, 24, 24, "none"),
    "value-head-differs-full-bias": (2, 37, 50, 2, 24, 40, "full"),
    "right-key-padding": (2, 100, 100, 2, 64, 64, "key_padding"),
    "left-padding-masks-a-whole-key-block": (2, 65, 130, 2, 64, 64, "left_padding"),
    "causal-head-128": (1, 33, 70, 2, 128, 128, "causal"),
    "per-head-bias-head-256": (1, 20, 40, 2, 256, 256, "per_head"),
}


def skip_bfloat16_on_the_interpreter(device: str, dtype: str) -> None:
    if device == "cpu" and dtype == "bfloat16":
        pytest.skip("Triton's interpreter multiplies bfloat16 tl.dot operands as their raw "
                    "uint16 bits (triton-lang/triton#11584, not supported upstream); bfloat16 "
                    "attention is checked on the GPU only")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_multi_head_attention_kernel_matches_reference(launch: Any, device: str, dtype: str,
                                                       name: str) -> None:
    skip_bfloat16_on_the_interpreter(device, dtype)
    case = CASES[name]
    num_heads, head = case[3], case[4]
    scale = 1.0 / math.sqrt(head)
    tensors = attention_inputs(*case, dtype=dtype, device=device)
    output = launch.multi_head_attention(**tensors, num_heads=num_heads, scale=scale)
    want = attention_expected(tensors, num_heads=num_heads, scale=scale)
    assert not np.isnan(want).any()
    assert_matches(f"MultiHeadAttention {name} {dtype}", output, want, dtype,
                   atol=attention_atol(dtype, tensors["value"].float().cpu().numpy()))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the 0 / 0
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_multi_head_attention_kernel_gives_nan_only_for_a_row_masked_everywhere(
        launch: Any, device: str, dtype: str) -> None:
    """As Softmax does: the fully masked query row is NaN, its neighbours are not."""
    tensors = attention_inputs(1, 8, 80, 2, 16, 16, "causal", dtype=dtype, device=device,
                               seed=1)
    tensors["attention_bias"][0, 0, 3, :] = float("-inf")
    output = launch.multi_head_attention(**tensors, num_heads=2, scale=0.25)
    nan_rows = output.float().isnan().any(dim=-1).cpu().numpy()[0]
    assert nan_rows.tolist() == [i == 3 for i in range(8)]
    assert_matches(f"MultiHeadAttention masked row {dtype}", output,
                   attention_expected(tensors, num_heads=2, scale=0.25), dtype,
                   atol=attention_atol(dtype, tensors["value"].float().cpu().numpy()))


def test_multi_head_attention_kernel_applies_the_scale(launch: Any, device: str) -> None:
    """A scale other than 1/sqrt(H), checked against the reference at two values."""
    tensors = attention_inputs(1, 16, 16, 1, 32, 32, "none", dtype="float32", device=device,
                               seed=2)
    sharp, flat = (launch.multi_head_attention(**tensors, num_heads=1, scale=s)
                   for s in (2.0, 0.01))
    for name, output, scale in (("scale 2.0", sharp, 2.0), ("scale 0.01", flat, 0.01)):
        assert_matches(name, output, attention_expected(tensors, num_heads=1, scale=scale),
                       "float32", atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.usefixtures("despecializable")
def test_multi_head_attention_kernel_without_alignment_hints_matches(
        launch: Any, device: str, dtype: str) -> None:
    """As TensorRT's AOT build compiles it (no alignment hints); the interpreter ignores hints."""
    skip_bfloat16_on_the_interpreter(device, dtype)
    case = CASES["right-key-padding"]
    tensors = attention_inputs(*case, dtype=dtype, device=device, seed=3)
    output = launch.multi_head_attention(**tensors, num_heads=2, scale=0.125,
                                         alignment_hints=False)
    assert_matches(f"MultiHeadAttention, no alignment hints {dtype}", output,
                   attention_expected(tensors, num_heads=2, scale=0.125), dtype,
                   atol=attention_atol(dtype, tensors["value"].float().cpu().numpy()))


def test_multi_head_attention_launch_rejects_a_bias_that_does_not_broadcast(
        launch: Any) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the launch takes "
                                "torch tensors")
    q = torch.zeros(2, 8, 64)
    with pytest.raises(ValueError, match=r"attention_bias \(2, 1, 8, 7\) does not broadcast"):
        launch.multi_head_attention(q, q, q, torch.zeros(2, 1, 8, 7), num_heads=4, scale=0.25)


def test_multi_head_attention_launch_rejects_heads_above_the_tile_limit(launch: Any) -> None:
    with pytest.raises(ValueError, match="head sizes 512/512 are outside the kernel's 1..256"):
        launch.multi_head_attention_parameters(batch=1, seq_q=8, num_heads=1, head_size=512,
                                               head_size_v=512, scale=1.0, float32=False)
