"""SkipLayerNorm plugin: reference vs the subgraph it replaces, decomposition, schema, kernel
contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from optimizer.plugins import PLUGINS
from optimizer.plugins.skip_layer_norm import MAX_HIDDEN
from optimizer.plugins.skip_layer_norm.trt_registration import (
    kernel_constexprs,
    kernel_signature,
    row_warps,
)
from optimizer.testing.passes import run_model
from tests.optimizer.plugins.support import (
    ONNX_TYPES,
    kernel_parameters,
    plugin_model,
    run_decomposed,
)

PLUGIN = PLUGINS["skip_layer_norm"]
# float16: the unfused graph rounds input + skip to float16 before normalizing, the op does not.
TOLERANCES = [(np.float32, 1e-5), (np.float16, 1e-2)]


def arrays(shape: tuple[int, ...], dtype: type, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hidden = shape[-1]
    return {
        "input": rng.standard_normal(shape).astype(dtype),
        "skip": rng.standard_normal(shape).astype(dtype),
        "gamma": rng.uniform(0.5, 1.5, hidden).astype(dtype),
        "beta": rng.standard_normal(hidden).astype(dtype),
        "bias": rng.standard_normal(hidden).astype(dtype),
    }


def standard_subgraph(values: dict[str, np.ndarray], epsilon: float,
                      opset: int = 17) -> onnx.ModelProto:
    """LayerNormalization(Add(Add(input, skip), bias), gamma, beta) → (output, sum)."""
    elem = ONNX_TYPES[values["input"].dtype]
    shape = list(values["input"].shape)
    nodes = [helper.make_node("Add", ["input", "skip"], ["partial"]),
             helper.make_node("Add", ["partial", "bias"], ["sum"]),
             helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["output"],
                              axis=-1, epsilon=epsilon)]
    graph = helper.make_graph(
        nodes, "skip_layer_norm",
        [helper.make_tensor_value_info(n, elem, shape) for n in ("input", "skip")],
        [helper.make_tensor_value_info(n, elem, shape) for n in ("output", "sum")],
        initializer=[numpy_helper.from_array(values[n], n) for n in ("gamma", "beta", "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("shape", [(2, 7, 32), (5, 48), (3, 1, 2, 80)])
def test_reference_matches_onnxruntime_on_the_replaced_subgraph(
        dtype: type, atol: float, shape: tuple[int, ...]) -> None:
    for seed in range(3):
        values = arrays(shape, dtype, seed)
        expected = run_model(standard_subgraph(values, 1e-5),
                             {"input": values["input"], "skip": values["skip"]})
        actual = PLUGIN.reference(*values.values(), epsilon=1e-5)
        for got, want in zip(actual, expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                       atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("opset", [17, 13])
@pytest.mark.parametrize("outputs", [1, 2])
def test_decomposed_node_matches_the_reference(dtype: type, atol: float, opset: int,
                                            outputs: int) -> None:
    values = arrays((2, 5, 24), dtype)
    model = plugin_model(PLUGIN, values, {"epsilon": 1e-3}, outputs=outputs,
                         constants=["gamma", "beta", "bias"], opset=opset)
    actual = run_decomposed(model, {"input": values["input"], "skip": values["skip"]})
    expected = PLUGIN.reference(*values.values(), epsilon=1e-3)[:outputs]
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=atol,
                                   rtol=1e-3)


def test_decomposing_below_opset_17_writes_the_normalization_out_in_float32() -> None:
    values = arrays((2, 4, 8), np.float16)
    from optimizer.plugins import decompose_for_onnxruntime

    decomposed = decompose_for_onnxruntime(
        plugin_model(PLUGIN, values, {"epsilon": 1e-5}, opset=13))
    ops = [n.op_type for n in decomposed.graph.node]
    assert "LayerNormalization" not in ops and ops.count("ReduceMean") == 2
    casts = [n for n in decomposed.graph.node if n.op_type == "Cast"]
    assert {a.i for n in casts for a in n.attribute} == {onnx.TensorProto.FLOAT,
                                                        onnx.TensorProto.FLOAT16}


def test_shape_inference_gives_both_outputs_the_input_shape_and_type() -> None:
    values = arrays((3, 6, 16), np.float16)
    model = plugin_model(PLUGIN, values, {"epsilon": 1e-5}, outputs=2)
    types = {v.name: v.type.tensor_type for v in model.graph.output}
    for name in ("output", "input_skip_bias_sum"):
        assert types[name].elem_type == onnx.TensorProto.FLOAT16
        assert [d.dim_value for d in types[name].shape.dim] == [3, 6, 16]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"skip": np.zeros((1, 6, 16), np.float32)}, "differ in shape"),
        ({"gamma": np.zeros(8, np.float32)}, "gamma has shape [8], expected [16]"),
        ({"bias": np.zeros((1, 16), np.float32)}, "bias has shape [1, 16]"),
        ({"beta": np.zeros(16, np.float16)}, "must share one type"),
    ],
    ids=["broadcast-skip", "gamma-size", "bias-rank", "mixed-types"],
)
def test_shape_inference_refuses_inputs_the_kernel_cannot_take(change: dict, message: str) -> None:
    values = {**arrays((3, 6, 16), np.float32), **change}
    with pytest.raises(onnx.shape_inference.InferenceError, match=message.replace("[", r"\[")):
        plugin_model(PLUGIN, values, {"epsilon": 1e-5})


def test_checker_requires_the_tensorrt_attributes() -> None:
    model = plugin_model(PLUGIN, arrays((2, 3, 8), np.float32), {"epsilon": 1e-5})
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "aot"]
    del node.attribute[:]
    node.attribute.extend(kept)
    with pytest.raises(onnx.checker.ValidationError, match="aot"):
        onnx.checker.check_model(model)


def test_shape_inference_refuses_a_foreign_plugin_namespace() -> None:
    model = plugin_model(PLUGIN, arrays((2, 3, 8), np.float32), {"epsilon": 1e-5},
                         infer_shapes=False)
    [namespace] = [a for a in model.graph.node[0].attribute if a.name == "plugin_namespace"]
    namespace.s = b"other"
    with pytest.raises(onnx.shape_inference.InferenceError, match="plugin_namespace"):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_kernel_takes_what_the_registration_compiles() -> None:
    source = (Path(PLUGIN.readme).parent / "kernel.py").read_text()
    runtime, constexprs = kernel_parameters(source, "skip_layer_norm_kernel")
    assert runtime == list(kernel_signature("*fp16"))
    assert sorted(constexprs) == sorted(kernel_constexprs(768, 1e-5))


def test_kernel_launch_fits_bert_sizes_and_refuses_wider_rows() -> None:
    assert kernel_constexprs(1024, 1e-12) == {"EPS": 1e-12, "BLOCK": 1024, "STORE_SUM": True}
    assert kernel_constexprs(768, 1e-5)["BLOCK"] == 1024
    assert [row_warps(b) for b in (64, 1024, 4096, 16384)] == [1, 4, 16, 16]
    with pytest.raises(ValueError, match="outside the kernel.s 1..16384"):
        kernel_constexprs(MAX_HIDDEN + 1, 1e-5)
