"""BiasGelu's Triton kernel against reference.bias_gelu (float32/float16/bfloat16, both forms).

Shapes cover an element count that is not a multiple of the kernel's 1024-element block (the
masked last program), one smaller than a block, and both ways the kernel finds bias columns:
rows at least a block wide (a block wraps into the next row at most once: 1500, 4096) and
narrower rows (a 32-bit modulo: 64, 333, 1000). Inputs span [-8, 8] so GELU's tails show.
"""

from __future__ import annotations

from typing import Any

import pytest

from optimizer.testing.kernel_cases import bias_gelu_expected, bias_gelu_inputs
from optimizer.testing.kernel_checks import DTYPES, assert_matches

SHAPES = [(3, 7, 1000), (5, 64), (2, 4096), (1, 3, 333), (3, 1500)]
APPROXIMATIONS = ["none", "tanh"]

# The tanh form is x * sigmoid(2u): below x ~ -10, exp(-2u) overflows to inf and the sigmoid is
# 1 / inf = 0, the right limit; numpy (the interpreter) warns about it, the GPU does not.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bias_gelu_kernel_matches_reference(launch: Any, device: str, dtype: str,
                                            shape: tuple[int, ...], approximate: str) -> None:
    tensors = bias_gelu_inputs(shape, dtype, device)
    output = launch.bias_gelu(**tensors, approximate=approximate)
    assert output.dtype == tensors["input"].dtype and output.shape == tensors["input"].shape
    assert_matches(f"BiasGelu {approximate} {shape} {dtype}", output,
                   bias_gelu_expected(tensors, approximate=approximate), dtype)


def test_bias_gelu_kernel_forms_differ_where_gelu_and_its_approximation_do(
        launch: Any, device: str) -> None:
    """The constexpr switch reaches the kernel: erf and tanh forms differ by up to ~1e-3."""
    tensors = bias_gelu_inputs((4, 256), "float32", device, seed=1)
    exact = launch.bias_gelu(**tensors, approximate="none")
    approximated = launch.bias_gelu(**tensors, approximate="tanh")
    assert (exact - approximated).abs().max().item() > 1e-4


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.usefixtures("despecializable")
def test_bias_gelu_kernel_without_alignment_hints_matches(
        launch: Any, device: str, approximate: str) -> None:
    """As TensorRT's AOT build compiles it (no alignment hints); the interpreter ignores hints."""
    tensors = bias_gelu_inputs((3, 7, 1000), "float16", device, seed=2)
    output = launch.bias_gelu(**tensors, approximate=approximate, alignment_hints=False)
    assert_matches(f"BiasGelu {approximate}, no alignment hints", output,
                   bias_gelu_expected(tensors, approximate=approximate), "float16")


def test_bias_gelu_launch_rejects_a_bias_of_the_wrong_size(launch: Any) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: the launch takes "
                                "torch tensors")
    with pytest.raises(ValueError, match=r"bias has shape \(63,\), expected \(64,\)"):
        launch.bias_gelu(torch.zeros(2, 64), torch.zeros(63), approximate="none")


def test_bias_gelu_launch_rejects_an_unknown_approximation(launch: Any) -> None:
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'fast'"):
        launch.bias_gelu_parameters(1024, "fast")
