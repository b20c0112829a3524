"""SkipLayerNorm's Triton kernel against reference.skip_layer_norm (float32/float16/bfloat16).

Hidden sizes cover a power of two, non-powers of two (masked tail of the row's block) and the
warp counts the registration picks (1, 4 and 16); the sum output is checked bit for bit (the
kernel and the reference both add in float32, in the same order, and round once).
"""

from __future__ import annotations

from typing import Any

import pytest

from optimizer.testing.kernel_cases import skip_layer_norm_expected, skip_layer_norm_inputs
from optimizer.testing.kernel_checks import DTYPES, assert_matches

EPSILON = 1e-5
SHAPES = [(3, 64), (2, 5, 1000), (4, 1024), (3, 3001), (2, 4096)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_skip_layer_norm_kernel_matches_reference(launch: Any, device: str, dtype: str,
                                                  shape: tuple[int, ...]) -> None:
    import torch

    tensors = skip_layer_norm_inputs(shape, dtype, device)
    output, total = launch.skip_layer_norm(**tensors, epsilon=EPSILON)
    want_output, want_total = skip_layer_norm_expected(tensors, epsilon=EPSILON)
    assert_matches(f"SkipLayerNorm output {shape} {dtype}", output, want_output, dtype)
    assert total is not None and total.dtype == tensors["input"].dtype
    if device == "cpu" and dtype == "bfloat16":
        # Triton's interpreter rounds float32 to bfloat16 toward zero (cast_impl passes no
        # rounding mode), the GPU to nearest even: within one bfloat16 ulp, not bit-exact.
        assert_matches(f"SkipLayerNorm sum {shape} {dtype}", total, want_total, dtype)
        return
    rounded = torch.from_numpy(want_total).to(total.dtype)
    assert torch.equal(total.cpu(), rounded), (
        f"SkipLayerNorm sum {shape} {dtype}: differs from the reference's float32 sum rounded "
        f"once, by up to {(total.cpu().float() - rounded.float()).abs().max().item():.3g}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_skip_layer_norm_kernel_without_sum_writes_only_the_output(launch: Any, device: str,
                                                                   dtype: str) -> None:
    tensors = skip_layer_norm_inputs((6, 768), dtype, device, seed=1)
    output, total = launch.skip_layer_norm(**tensors, epsilon=EPSILON, store_sum=False)
    assert total is None
    assert_matches(f"SkipLayerNorm output without sum {dtype}", output,
                   skip_layer_norm_expected(tensors, epsilon=EPSILON)[0], dtype)


def test_skip_layer_norm_kernel_normalizes_each_row_on_its_own(launch: Any,
                                                               device: str) -> None:
    """Rows of very different scale: a row that read its neighbour's statistics would show."""
    tensors = skip_layer_norm_inputs((4, 1000), "float32", device, seed=2)
    tensors["input"][1] *= 1000.0
    tensors["input"][2] = 0.25  # a constant row: only skip and bias vary
    output, _ = launch.skip_layer_norm(**tensors, epsilon=EPSILON)
    assert_matches("SkipLayerNorm rows of different scale", output,
                   skip_layer_norm_expected(tensors, epsilon=EPSILON)[0], "float32", atol=1e-4)


@pytest.mark.usefixtures("despecializable")
def test_skip_layer_norm_kernel_without_alignment_hints_matches(
        launch: Any, device: str) -> None:
    """As TensorRT's AOT build compiles it (no alignment hints); the interpreter ignores hints."""
    tensors = skip_layer_norm_inputs((5, 1000), "float16", device, seed=3)
    output, _ = launch.skip_layer_norm(**tensors, epsilon=EPSILON, alignment_hints=False)
    assert_matches("SkipLayerNorm output, no alignment hints", output,
                   skip_layer_norm_expected(tensors, epsilon=EPSILON)[0], "float16")


@pytest.mark.parametrize(("change", "message"), [
    ({"skip": (3, 65)}, "must have one shape"),
    ({"gamma": (65,)}, r"gamma has shape \(65,\), expected \(64,\)"),
    ({"bias": "float16"}, "bias has dtype torch.float16 and input torch.float32"),
])
def test_skip_layer_norm_launch_rejects_bad_tensors(launch: Any, change: dict[str, Any],
                                                    message: str) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the launch takes "
                                "torch tensors")
    tensors = {name: torch.zeros(size) for name, size in
               {"input": (3, 64), "skip": (3, 64), "gamma": (64,), "beta": (64,),
                "bias": (64,)}.items()}
    for name, what in change.items():
        tensors[name] = (tensors[name].to(getattr(torch, what)) if isinstance(what, str)
                         else torch.zeros(what))
    with pytest.raises(ValueError, match=message):
        launch.skip_layer_norm(**tensors, epsilon=EPSILON)


def test_skip_layer_norm_launch_rejects_rows_wider_than_a_program(launch: Any) -> None:
    with pytest.raises(ValueError, match="hidden size 16385 is outside the kernel's 1..16384"):
        launch.skip_layer_norm_parameters(2, 16385, EPSILON)
