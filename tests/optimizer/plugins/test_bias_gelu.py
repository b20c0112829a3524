"""BiasGelu plugin: reference vs the subgraphs it replaces, decomposition, schema, kernel
contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from optimizer.plugins import PLUGINS
from optimizer.plugins.bias_gelu.trt_registration import (
    BLOCK,
    kernel_constexprs,
    kernel_signature,
)
from optimizer.testing.gelu_models import gelu
from optimizer.testing.passes import random_inputs, run_model
from tests.optimizer.plugins.support import kernel_parameters, plugin_model, run_decomposed

PLUGIN = PLUGINS["bias_gelu"]
TOLERANCES = [(np.float32, 1e-5), (np.float16, 4e-3)]


def _bias(model: onnx.ModelProto) -> np.ndarray:
    [bias] = [numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "bias"]
    return bias


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize(("form", "spelling"), [("erf", "add"), ("tanh", "add"),
                                                ("erf", "gelu20"), ("tanh", "gelu20")])
def test_reference_matches_onnxruntime_on_the_replaced_subgraph(
        dtype: type, atol: float, form: str, spelling: str) -> None:
    for seed in range(3):
        model = gelu(form=form, dtype=dtype, bias=spelling, shape=(2, 5, 64),
                     opset=20 if spelling == "gelu20" else 18, seed=seed)
        feeds = random_inputs(model, seed)
        [expected] = run_model(model, feeds)
        [actual] = PLUGIN.reference(feeds["input"], _bias(model),
                                    approximate="none" if form == "erf" else form)
        assert actual.dtype == expected.dtype
        np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32),
                                   atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_decomposed_node_matches_the_reference(dtype: type, atol: float, approximate: str) -> None:
    rng = np.random.default_rng(1)
    values = {"input": (3 * rng.standard_normal((4, 3, 32))).astype(dtype),
              "bias": rng.standard_normal(32).astype(dtype)}
    model = plugin_model(PLUGIN, values, {"approximate": approximate}, constants=["bias"])
    [actual] = run_decomposed(model, {"input": values["input"]})
    [expected] = PLUGIN.reference(*values.values(), approximate=approximate)
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32), atol=atol,
                               rtol=1e-3)


def test_reference_refuses_an_unknown_approximation() -> None:
    with pytest.raises(ValueError, match="approximate must be one of"):
        PLUGIN.reference(np.zeros((1, 4), np.float32), np.zeros(4, np.float32),
                         approximate="sigmoid")


@pytest.mark.parametrize(
    ("values", "attributes", "message"),
    [
        ({"bias": np.zeros(8, np.float32)}, {"approximate": "none"}, "expected [32]"),
        ({}, {"approximate": "fast"}, "approximate is 'fast'"),
    ],
    ids=["bias-size", "approximation"],
)
def test_shape_inference_refuses_what_the_kernel_cannot_take(
        values: dict, attributes: dict, message: str) -> None:
    base = {"input": np.zeros((2, 32), np.float32), "bias": np.zeros(32, np.float32)}
    with pytest.raises(onnx.shape_inference.InferenceError, match=message.replace("[", r"\[")):
        plugin_model(PLUGIN, {**base, **values}, attributes)


def test_shape_inference_keeps_symbolic_dims() -> None:
    model = plugin_model(PLUGIN, {"input": np.zeros((2, 32), np.float16),
                                  "bias": np.zeros(32, np.float16)},
                         {"approximate": "tanh"}, infer_shapes=False)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    [output] = inferred.graph.output
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", 32]


def test_kernel_takes_what_the_registration_compiles() -> None:
    source = (Path(PLUGIN.readme).parent / "kernel.py").read_text()
    runtime, constexprs = kernel_parameters(source, "bias_gelu_kernel")
    assert runtime == list(kernel_signature("*bf16"))
    assert sorted(constexprs) == sorted(kernel_constexprs("tanh"))
    assert kernel_constexprs("none") == {"APPROXIMATE_TANH": False, "BLOCK": BLOCK}
    with pytest.raises(ValueError, match="approximate must be one of"):
        kernel_constexprs("exact")
