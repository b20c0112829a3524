"""The plugin registry: every plugin is complete (schema, reference, decomposition, README, TensorRT
registration, kernel) and describes itself for GET /v1/plugins."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx.defs
import pytest

from optimizer.errors import PluginNotFoundError
from optimizer.plugins import DOMAIN, PLUGINS, TRT_NAMESPACE, Plugin, plugin_for_op

ALL = list(PLUGINS.values())
IDS = list(PLUGINS)
REPO = Path(__file__).resolve().parents[3]


def test_the_three_required_plugins_are_registered() -> None:
    assert {p.op_type for p in ALL} >= {"SkipLayerNorm", "BiasGelu", "MultiHeadAttention"}
    assert all(p.domain == DOMAIN == TRT_NAMESPACE for p in ALL)
    assert len({p.op_type for p in ALL}) == len(ALL)


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
def test_schema_is_registered_with_every_attribute_required(plugin: Plugin) -> None:
    schema = onnx.defs.get_schema(plugin.op_type, plugin.version, plugin.domain)
    assert schema.has_type_and_shape_inference_function
    assert [i.name for i in schema.inputs] == [p.name for p in plugin.inputs]
    assert [o.name for o in schema.outputs] == [p.name for p in plugin.outputs]
    assert {name: a.required for name, a in schema.attributes.items()} == {
        a.name: True for a in plugin.all_attributes}
    assert set(schema.type_constraints[0].allowed_type_strs) == set(plugin.type_constraint)


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
def test_description_is_json_and_its_readme_documents_the_contract(plugin: Plugin) -> None:
    described = json.loads(json.dumps(plugin.describe()))
    assert described["op_type"] == plugin.op_type and described["domain"] == DOMAIN
    assert described["tensorrt"]["plugin"] == f"{TRT_NAMESPACE}::{plugin.op_type}"
    readme = (REPO / described["readme"]).read_text()
    for name in [p.name for p in (*plugin.inputs, *plugin.outputs)] + [
            a.name for a in plugin.all_attributes]:
        assert f"`{name}`" in readme, f"{described['readme']} does not document {name}"
    for heading in ("## Contract", "## Limits", "## What it replaces"):
        assert heading in readme


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
def test_tensorrt_registration_imports_without_tensorrt_and_keeps_real_annotations(
        plugin: Plugin) -> None:
    module = importlib.import_module(plugin.trt_registration)
    assert module.PLUGIN_ID == plugin.trt_plugin_id
    tree = ast.parse(Path(module.__file__).read_text())
    # tensorrt.plugin inspects the annotations at run time: strings would break it.
    assert not [n for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module == "__future__"]


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
def test_kernel_parses_and_is_imported_by_nothing_that_runs_without_triton(
        plugin: Plugin) -> None:
    kernel = plugin.readme.parent / "kernel.py"
    tree = ast.parse(kernel.read_text())
    jitted = [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              and any(ast.unparse(d) == "triton.jit" for d in f.decorator_list)]
    assert len(jitted) == 1


def test_importing_the_plugins_and_the_pass_loads_no_kernel_tensorrt_or_triton() -> None:
    code = ("import sys, optimizer.plugins, optimizer.passes.fuse_to_plugins\n"
            "print(sorted(m for m in sys.modules if m.startswith(('triton', 'tensorrt'))"
            " or m.endswith('.kernel')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=REPO)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_reference_returns_every_output_in_the_input_type(plugin: Plugin, dtype: type) -> None:
    rng = np.random.default_rng(0)
    shapes = {"skip_layer_norm": [(2, 3, 8), (2, 3, 8), (8,), (8,), (8,)],
              "bias_gelu": [(2, 3, 8), (8,)],
              "multi_head_attention": [(2, 3, 8), (2, 5, 8), (2, 5, 4), (1, 1, 1, 5)]}[plugin.name]
    attributes = {"skip_layer_norm": {"epsilon": 1e-5}, "bias_gelu": {"approximate": "none"},
                  "multi_head_attention": {"num_heads": 2, "scale": 0.5}}[plugin.name]
    outputs = plugin.reference(*(rng.standard_normal(s).astype(dtype) for s in shapes),
                               **attributes)
    assert len(outputs) == len(plugin.outputs)
    assert all(o.dtype == dtype for o in outputs)


def test_node_attributes_add_the_tensorrt_ones_and_refuse_missing_values() -> None:
    plugin = PLUGINS["multi_head_attention"]
    assert plugin.node_attributes(num_heads=2, scale=0.5) == {
        "num_heads": 2, "scale": 0.5, "plugin_namespace": "fuseforge", "aot": 1}
    with pytest.raises(ValueError, match="takes attributes"):
        plugin.node_attributes(num_heads=2)


def test_unknown_op_names_the_plugins_there_are() -> None:
    with pytest.raises(PluginNotFoundError, match="BiasGelu, MultiHeadAttention, SkipLayerNorm"):
        plugin_for_op(DOMAIN, "RotaryEmbedding")
    with pytest.raises(PluginNotFoundError):
        plugin_for_op("com.microsoft", "BiasGelu")


@pytest.mark.parametrize("plugin", ALL, ids=IDS)
def test_registering_without_tensorrt_raises_import_error(plugin: Plugin) -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("TensorRT is installed here; test_trt_registration.py registers for real")
    module = importlib.import_module(plugin.trt_registration)
    with pytest.raises(ImportError):
        module.register()
