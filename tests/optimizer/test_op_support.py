"""check_op_support: opsets and operator domains are judged by what is installed."""

from __future__ import annotations

import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from optimizer.errors import UnsupportedModelError
from optimizer.op_support import check_op_support, installed_op_support
from optimizer.plugins import DOMAIN, PLUGINS
from optimizer.testing import models
from tests.support import hostile_models


def _check(data: bytes | onnx.ModelProto) -> None:
    model = data if isinstance(data, onnx.ModelProto) else onnx.load_from_string(data)
    check_op_support(model, "model.onnx")


def _single_node(node: onnx.NodeProto, opsets: list[onnx.OperatorSetIdProto],
                 functions: list[onnx.FunctionProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "one_node", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", models.OPSET), *opsets],
        functions=functions or [])
    model.ir_version = models.IR_VERSION
    return model


def _ort_loads(model: onnx.ModelProto) -> bool:
    try:
        onnxruntime.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    except Exception:  # ONNX Runtime raises its own Fail/InvalidGraph classes
        return False
    return True


def test_the_newest_opset_is_accepted_and_the_next_is_refused_naming_both_packages() -> None:
    support = installed_op_support()
    newest = min(support.onnx_opsets[""], support.ort_opsets[""])
    _check(hostile_models.with_opset(newest))
    with pytest.raises(UnsupportedModelError) as caught:
        _check(hostile_models.with_opset(newest + 1))
    message = str(caught.value)
    assert f"imports opset {newest + 1} of the default ONNX domain" in message
    assert f"onnx {onnx.__version__} up to opset {onnx.defs.onnx_opset_version()}" in message
    assert f"ONNX Runtime {onnxruntime.__version__} up to opset {support.ort_opsets['']}" in message


def test_onnx_runtime_loads_exactly_the_opsets_we_accept() -> None:
    # The newest since_version in ONNX Runtime's schemas stands in for the table ONNX Runtime
    # checks at load; this holds the two equal for the installed version.
    newest = installed_op_support().ort_opsets[""]
    relu = models.mlp()
    relu.opset_import[0].version = newest
    assert _ort_loads(relu)
    relu.opset_import[0].version = newest + 1
    assert not _ort_loads(relu)


def test_ai_onnx_is_the_default_domain() -> None:
    model = models.mlp()
    model.opset_import[0].domain = "ai.onnx"
    model.opset_import[0].version = 10_000
    with pytest.raises(UnsupportedModelError, match="of the default ONNX domain"):
        _check(model)


def test_a_node_in_an_unknown_domain_is_refused_naming_the_domains_that_work() -> None:
    with pytest.raises(UnsupportedModelError) as caught:
        _check(hostile_models.unknown_domain("evil.example", "Exfiltrate"))
    message = str(caught.value)
    assert "node 'custom' (op 'Exfiltrate') is in domain 'evil.example'" in message
    assert "'com.microsoft'" in message and f"'{DOMAIN}'" in message


def test_contrib_ops_of_onnx_runtime_are_accepted_and_unknown_ones_refused() -> None:
    gelu = helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")
    _check(_single_node(gelu, [helper.make_opsetid("com.microsoft", 1)]))
    made_up = helper.make_node("NoSuchContribOp", ["x"], ["y"], domain="com.microsoft")
    with pytest.raises(UnsupportedModelError, match="'NoSuchContribOp' in domain "
                                                    "'com.microsoft'.* is not an operator"):
        _check(_single_node(made_up, [helper.make_opsetid("com.microsoft", 1)]))


def test_plugin_ops_are_accepted_and_unknown_fuseforge_ops_refused() -> None:
    plugin = next(iter(PLUGINS.values()))
    node = helper.make_node(plugin.op_type, ["x"], ["y"], domain=DOMAIN)
    _check(_single_node(node, [helper.make_opsetid(DOMAIN, 1)]))
    made_up = helper.make_node("NoSuchPlugin", ["x"], ["y"], domain=DOMAIN)
    with pytest.raises(UnsupportedModelError, match=f"claims FuseForge's plugin domain "
                                                    f"'{DOMAIN}', which has only"):
        _check(_single_node(made_up, [helper.make_opsetid(DOMAIN, 1)]))


def test_a_call_to_a_local_function_of_any_domain_is_the_models_own() -> None:
    function = helper.make_function(
        "my.company", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
        [helper.make_opsetid("", models.OPSET)])
    node = helper.make_node("Twice", ["x"], ["y"], domain="my.company")
    _check(_single_node(node, [helper.make_opsetid("my.company", 1)], [function]))


def test_an_opset_newer_than_our_plugins_is_refused() -> None:
    plugin = next(iter(PLUGINS.values()))
    node = helper.make_node(plugin.op_type, ["x"], ["y"], domain=DOMAIN)
    with pytest.raises(UnsupportedModelError, match=f"opset 7 of domain '{DOMAIN}'"):
        _check(_single_node(node, [helper.make_opsetid(DOMAIN, 7)]))
