"""Each plugin's launch geometry is written once, in its geometry.py: the TensorRT registration
imports it and the GPU checks' launcher (optimizer.testing.triton_launch) loads the same file,
so a GPU test cannot pass against a geometry the plugin no longer builds with."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType

import pytest

from optimizer.plugins import PLUGINS, multi_head_attention, skip_layer_norm
from optimizer.plugins.bias_gelu import geometry as bias_gelu_geometry
from optimizer.plugins.bias_gelu import trt_registration as bias_gelu_registration
from optimizer.plugins.multi_head_attention import geometry as attention_geometry
from optimizer.plugins.multi_head_attention import trt_registration as attention_registration
from optimizer.plugins.skip_layer_norm import geometry as skip_layer_norm_geometry
from optimizer.plugins.skip_layer_norm import trt_registration as skip_layer_norm_registration
from optimizer.testing import triton_launch

GEOMETRIES = {"bias_gelu": bias_gelu_geometry, "multi_head_attention": attention_geometry,
              "skip_layer_norm": skip_layer_norm_geometry}


def test_every_plugin_has_a_geometry() -> None:
    assert sorted(GEOMETRIES) == sorted(PLUGINS)


@pytest.mark.parametrize("plugin", sorted(GEOMETRIES))
def test_the_launcher_loads_the_file_the_registration_imports(plugin: str) -> None:
    loaded = triton_launch._geometry(plugin)
    assert Path(loaded.__file__ or "").resolve() == Path(GEOMETRIES[plugin].__file__ or "").resolve()


@pytest.mark.parametrize("plugin", sorted(GEOMETRIES))
def test_a_geometry_imports_only_the_standard_library(plugin: str) -> None:
    """What lets the launcher load it on a GPU machine without onnx (see triton_launch)."""
    tree = ast.parse(Path(GEOMETRIES[plugin].__file__ or "").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_attention_registration_launches_with_the_geometry() -> None:
    registration: ModuleType = attention_registration
    assert registration.tiles is attention_geometry.tiles
    assert registration.bias_strides is attention_geometry.bias_strides
    assert registration.kernel_constexprs is attention_geometry.kernel_constexprs
    assert registration.NUM_WARPS == attention_geometry.NUM_WARPS
    assert multi_head_attention.MAX_HEAD_SIZE == attention_geometry.MAX_HEAD_SIZE


def test_the_skip_layer_norm_registration_launches_with_the_geometry() -> None:
    assert skip_layer_norm_registration.kernel_constexprs is skip_layer_norm_geometry.kernel_constexprs
    assert skip_layer_norm_registration.row_warps is skip_layer_norm_geometry.row_warps
    assert skip_layer_norm.MAX_HIDDEN == skip_layer_norm_geometry.MAX_HIDDEN


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_bias_gelu_registration_launches_with_the_geometry(approximate: str) -> None:
    assert bias_gelu_registration.BLOCK == bias_gelu_geometry.BLOCK
    assert bias_gelu_registration.NUM_WARPS == bias_gelu_geometry.NUM_WARPS
    assert (bias_gelu_registration.kernel_constexprs(approximate)
            == bias_gelu_geometry.kernel_constexprs(approximate))


def test_the_launcher_launches_attention_with_the_geometry() -> None:
    """A change to geometry.py reaches the launcher: its parameters are the geometry's, for a
    head size whose tiles differ from the defaults."""
    params = triton_launch.multi_head_attention_parameters(
        batch=2, seq_q=100, num_heads=3, head_size=200, head_size_v=40, scale=0.5, float32=False)
    assert params.constexprs == attention_geometry.kernel_constexprs(
        num_heads=3, head_size=200, head_size_v=40, scale=0.5, float32=False)
    assert params.num_warps == attention_geometry.NUM_WARPS
    assert params.grid == (-(-100 // attention_geometry.tiles(200, 40)[0]), 6)
    assert triton_launch.bias_strides((2, 1, 8, 16)) == attention_geometry.bias_strides((2, 1, 8, 16))
    assert triton_launch.MAX_HEAD_SIZE == attention_geometry.MAX_HEAD_SIZE
    assert triton_launch.MAX_HIDDEN == skip_layer_norm_geometry.MAX_HIDDEN
    assert triton_launch.BIAS_GELU_BLOCK == bias_gelu_geometry.BLOCK
