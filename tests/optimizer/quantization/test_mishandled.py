"""Finding the quantized nodes a runtime computes wrongly: float inputs for named nodes, the
bisection, and the search keeping such a node in float where ONNX Runtime runs the Q/DQ graph
within budget and the backend's runtime does not."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import run_outputs
from optimizer.quantization.calibration import calibrate
from optimizer.quantization.mishandled import find_mishandled, float_inputs, quantized_nodes
from optimizer.quantization.search import QuantizationRequest, quantize_within_budget
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode
from optimizer.testing.quantization_models import calibration_images, conv_stack
from optimizer.validation.tolerances import default_tolerances
from tests.support.mishandling_runtime import VICTIM


def _qdq_conv(seed: int = 0) -> tuple[onnx.ModelProto, np.ndarray]:
    """x -> Q -> DQ -> Conv (weights: int8 per output channel through a DequantizeLinear) -> y;
    and the weights' float values."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    scales = rng.uniform(0.001, 0.01, 4).astype(np.float32)
    initializers = [
        numpy_helper.from_array(weights, "w_int8"),
        numpy_helper.from_array(scales, "w_scale"),
        numpy_helper.from_array(np.zeros(4, np.int8), "w_zero"),
        numpy_helper.from_array(np.float32(0.05), "x_scale"),
        numpy_helper.from_array(np.uint8(128), "x_zero")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="q"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="dq"),
        helper.make_node("DequantizeLinear", ["w_int8", "w_scale", "w_zero"], ["w_dq"],
                         name="w_dq", axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, weights.astype(np.float32) * scales[:, None, None, None]


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _float_conv(weights: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "float_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(weights, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float_inputs_give_a_node_the_float_values_its_dequantize_inputs_stood_for() -> None:
    model, weights = _qdq_conv()
    x = np.random.default_rng(1).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    x[0, 0, 4, 4] = 100.0  # beyond the quantizer's range: [-128, 127] steps of 0.05

    assert quantized_nodes(model) == ["conv"]
    restored = float_inputs(model, ["conv"])
    want = _run(_float_conv(weights), np.clip(x, -6.4, 6.35))

    # The activation is x in the quantizer's range, not rounded to its 0.05 steps (the range
    # stays: a quantizer may stand for a Relu); the weights are their float values.
    np.testing.assert_allclose(_run(restored, x), want, rtol=1e-5, atol=1e-5)
    assert np.abs(_run(model, x) - want).max() > 1e-3
    onnx.checker.check_model(restored)
    assert model.graph.node[3].input[:] == ["x_dq", "w_dq"]  # the original is untouched


def test_float_inputs_of_no_node_is_the_model_itself() -> None:
    model, _ = _qdq_conv()
    assert float_inputs(model, []) == model


@pytest.mark.parametrize("culprits", [{"n7"}, {"n0"}, {"n19"}, {"n3", "n15"}])
def test_the_bisection_finds_the_nodes_without_which_the_model_is_within_budget(
        culprits: set[str]) -> None:
    order = [f"n{i}" for i in range(20)]
    calls: list[Sequence[str]] = []

    def within_budget(in_float: Sequence[str]) -> bool:
        calls.append(in_float)
        return culprits <= set(in_float)

    assert set(find_mishandled(order, within_budget)) == culprits
    # About log2(20) + 2 judgements a node, not one per node.
    assert len(calls) <= len(culprits) * (math.ceil(math.log2(len(order))) + 2)


def test_the_bisection_gives_up_where_no_node_explains_the_error() -> None:
    order = [f"n{i}" for i in range(8)]
    assert find_mishandled(order, lambda _: False) == []
    # Four culprits, three sought: it stops rather than keep everything in float.
    four = {"n1", "n3", "n5", "n7"}
    assert find_mishandled(order, lambda names: four <= set(names)) == []


def test_a_node_the_runtime_mishandles_is_kept_in_float_and_int8_meets_the_budget() -> None:
    model = conv_stack(seed=3)
    fused, _ = optimize_model(model, OptimizeOptions(for_quantization=True))
    assert VICTIM in {node.name for node in fused.graph.node}
    validation = [{"input": x} for x in calibration_images(model, 3, seed=99)]
    calibration = [{"input": x} for x in calibration_images(model, 6, seed=1)]

    result = quantize_within_budget(
        fused, request=QuantizationRequest(
            mode=QuantizationMode.STATIC, method=CalibrationMethod.MINMAX, threads=1,
            time_candidates=False,
            candidate_runner="tests.support.mishandling_runtime:mishandling_runner"),
        tolerances=default_tolerances("int8"), validation_feeds=validation,
        reference=run_outputs(model, validation), calibration_feeds=calibration,
        tables=lambda method, graph: calibrate(graph, calibration, method))

    assert result.tried[0]["passed"] is False  # all int8, judged in the mishandling runtime
    assert result.shipped == "int8", result.why
    assert [node.name for node in result.kept_nodes] == [VICTIM]
    assert "computes its quantized form wrongly" in result.kept_reasons[VICTIM]
    assert result.validation is not None and result.validation.passed
    assert result.model is not None
    dequantized = {node.output[0] for node in result.model.graph.node
                   if node.op_type == "DequantizeLinear"}
    [victim] = [node for node in result.model.graph.node if node.name == VICTIM]
    assert victim.input[1] not in dequantized  # its weights are float: not int8 any more
    assert len(quantized_nodes(result.model)) > 5  # the rest stays int8
