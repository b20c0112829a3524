"""decompose_for_onnxruntime: plugin nodes become standard ops; names, imports and errors."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper

from optimizer.errors import PluginNotFoundError
from optimizer.plugins import (
    DOMAIN,
    PLUGINS,
    decompose_for_onnxruntime,
    has_plugin_nodes,
    plugins_used,
)
from optimizer.testing.passes import run_model
from tests.optimizer.plugins.support import plugin_chain, plugin_chain_output

GELU = PLUGINS["bias_gelu"]
SKIP_LN = PLUGINS["skip_layer_norm"]


def test_decomposing_a_proto_returns_a_new_standard_model_with_the_same_outputs() -> None:
    model = plugin_chain()
    before = model.SerializeToString()
    decomposed = decompose_for_onnxruntime(model)
    assert model.SerializeToString() == before
    assert {n.domain for n in decomposed.graph.node} == {""}
    assert DOMAIN not in {o.domain for o in decomposed.opset_import}
    assert [o.name for o in decomposed.graph.output] == ["y"]
    onnx.checker.check_model(decomposed, full_check=True)
    names = [v for n in decomposed.graph.node for v in n.output]
    assert len(names) == len(set(names))
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    [y] = run_model(decomposed, {"x": x})
    np.testing.assert_allclose(y, plugin_chain_output(model, x), atol=1e-5)


def test_decomposing_an_ir_model_rewrites_it_in_place() -> None:
    model = ir.from_proto(plugin_chain())
    assert has_plugin_nodes(model) and plugins_used(model) == ("bias_gelu", "skip_layer_norm")
    assert decompose_for_onnxruntime(model) is model
    assert not has_plugin_nodes(model) and plugins_used(model) == ()


def test_decomposing_an_unknown_fuseforge_op_names_the_known_ones() -> None:
    model = plugin_chain()
    model.graph.node[1].op_type = "QuickGelu"
    with pytest.raises(PluginNotFoundError, match="no plugin implements op 'fuseforge.QuickGelu'"):
        decompose_for_onnxruntime(model)


def test_an_omitted_optional_output_is_not_replaced() -> None:
    """SkipLayerNorm declared with outputs ["y", ""]: the decomposed sum keeps its own name."""
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((2, 8)).astype(np.float32),
              "skip": rng.standard_normal((2, 8)).astype(np.float32)}
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n)
             for n in ("gamma", "beta", "bias")]
    node = helper.make_node("SkipLayerNorm", ["x", "skip", "gamma", "beta", "bias"], ["y", ""],
                            domain=DOMAIN, **SKIP_LN.node_attributes(epsilon=1e-5))
    graph = helper.make_graph(
        [node], "omitted",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 8]) for n in values],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(DOMAIN, 1)])
    decomposed = decompose_for_onnxruntime(model)
    onnx.checker.check_model(decomposed, full_check=True)
    [y] = run_model(decomposed, values)
    params = [numpy_helper.to_array(t) for t in inits]
    np.testing.assert_allclose(y, SKIP_LN.reference(*values.values(), *params, epsilon=1e-5)[0],
                               atol=1e-5)
