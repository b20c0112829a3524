"""The launch layer launches each kernel as TensorRT will: the registrations' constexprs, warps,
grid and int32 arguments. The launch layer mirrors them (it cannot import the registrations,
see optimizer/testing/triton_launch.py), so the two are compared here over many sizes.
Needs neither torch nor triton; needs what the registrations' package imports (onnx, onnx_ir).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from optimizer.testing import triton_launch

try:
    import optimizer.plugins  # noqa: F401  (needs onnx and onnx_ir)
except ImportError as err:
    pytest.skip(f"the registrations' package optimizer.plugins does not import here: {err}",
                allow_module_level=True)

from optimizer.plugins import multi_head_attention, skip_layer_norm  # noqa: E402
from optimizer.plugins.bias_gelu import trt_registration as bias_gelu_registration  # noqa: E402
from optimizer.plugins.multi_head_attention import (  # noqa: E402
    trt_registration as attention_registration,
)
from optimizer.plugins.skip_layer_norm import (  # noqa: E402
    trt_registration as skip_layer_norm_registration,
)


@pytest.fixture
def launch() -> Any:
    return triton_launch


@pytest.mark.parametrize("hidden", [1, 64, 255, 768, 1000, 1024, 3001, 4096, 8192, 16384])
def test_skip_layer_norm_launch_matches_registration(launch: Any, hidden: int) -> None:
    params = launch.skip_layer_norm_parameters(7, hidden, 1e-12)
    constexprs = skip_layer_norm_registration.kernel_constexprs(hidden, 1e-12)
    assert params.constexprs == constexprs
    assert params.num_warps == skip_layer_norm_registration.row_warps(int(constexprs["BLOCK"]))
    assert params.grid == (7,)  # launch.grid_x = numel // hidden: one program per row


def test_skip_layer_norm_limits_agree(launch: Any) -> None:
    assert launch.MAX_HIDDEN == skip_layer_norm.MAX_HIDDEN
    with pytest.raises(ValueError):
        skip_layer_norm_registration.kernel_constexprs(skip_layer_norm.MAX_HIDDEN + 1, 1e-5)
    with pytest.raises(ValueError):
        launch.skip_layer_norm_parameters(1, skip_layer_norm.MAX_HIDDEN + 1, 1e-5)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("n_elements", [1, 1023, 1024, 1025, 65536 * 4096])
def test_bias_gelu_launch_matches_registration(launch: Any, approximate: str,
                                               n_elements: int) -> None:
    params = launch.bias_gelu_parameters(n_elements, approximate)
    assert params.constexprs == bias_gelu_registration.kernel_constexprs(approximate)
    assert launch.BIAS_GELU_BLOCK == bias_gelu_registration.BLOCK
    assert params.num_warps == bias_gelu_registration.NUM_WARPS
    assert params.grid == (math.ceil(n_elements / bias_gelu_registration.BLOCK),)


@pytest.mark.parametrize(("head_size", "head_size_v"),
                         [(1, 1), (16, 16), (24, 40), (64, 64), (65, 64), (128, 128),
                          (129, 64), (200, 256), (256, 256)])
@pytest.mark.parametrize("float32", [True, False])
def test_multi_head_attention_launch_matches_registration(launch: Any, head_size: int,
                                                          head_size_v: int,
                                                          float32: bool) -> None:
    params = launch.multi_head_attention_parameters(
        batch=3, seq_q=100, num_heads=4, head_size=head_size, head_size_v=head_size_v,
        scale=0.125, float32=float32)
    constexprs = attention_registration.kernel_constexprs(
        num_heads=4, head_size=head_size, head_size_v=head_size_v, scale=0.125,
        float32=float32)
    assert params.constexprs == constexprs
    assert params.num_warps == attention_registration.NUM_WARPS
    # grid_x = cdiv(seq_q, BLOCK_M), grid_y = batch * num_heads
    assert params.grid == (math.ceil(100 / int(constexprs["BLOCK_M"])), 12)


def test_multi_head_attention_limits_agree(launch: Any) -> None:
    assert launch.MAX_HEAD_SIZE == multi_head_attention.MAX_HEAD_SIZE
    with pytest.raises(ValueError):
        attention_registration.tiles(multi_head_attention.MAX_HEAD_SIZE + 1, 64)
    with pytest.raises(ValueError):
        launch.multi_head_attention_parameters(
            batch=1, seq_q=1, num_heads=1, head_size=multi_head_attention.MAX_HEAD_SIZE + 1,
            head_size_v=64, scale=1.0, float32=True)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 1, 8, 16), (2, 4, 8, 16), (1, 4, 1, 16),
                                   (3, 1, 1, 5)])
def test_bias_strides_match_registration(launch: Any, shape: tuple[int, ...]) -> None:
    assert launch.bias_strides(shape) == attention_registration.bias_strides(shape)


@pytest.mark.parametrize(("plugin", "registration"), [
    ("skip_layer_norm", skip_layer_norm_registration),
    ("bias_gelu", bias_gelu_registration),
    ("multi_head_attention", attention_registration),
])
def test_unspecialized_arguments_are_the_registrations_runtime_arguments(
        launch: Any, plugin: str, registration: Any) -> None:
    """alignment_hints=False despecializes exactly the int32 arguments and pointers TensorRT
    passes (a name missed here would be specialized where TensorRT's build is not)."""
    ints, pointers = launch._KERNEL_ARGUMENTS[plugin]
    signature = registration.kernel_signature("*fp16")
    assert list(ints) == [name for name, kind in signature.items() if kind == "i32"]
    assert list(pointers) == [name for name, kind in signature.items() if kind == "*fp16"]
