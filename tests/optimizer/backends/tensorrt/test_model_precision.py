"""check_model_precision: a TensorRT job's precision must be in the ONNX types (strong typing)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.backends.tensorrt.model_precision import check_model_precision, model_precision
from optimizer.errors import EngineBuildError
from optimizer.precision.convert import convert_precision
from optimizer.testing import models


def qdq_model(zero_point_type: int | None, *, output_dtype: int | None = None) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> Relu, with the given zero-point type."""
    initializers = [numpy_helper.from_array(np.array(0.02, np.float32), "scale")]
    q_inputs, dq_inputs = ["x", "scale"], ["q", "scale"]
    if zero_point_type is not None:
        initializers.append(helper.make_tensor("zero", zero_point_type, [], [0]))
        q_inputs.append("zero")
        dq_inputs.append("zero")
    attributes = {"output_dtype": output_dtype} if output_dtype else {}
    nodes = [helper.make_node("QuantizeLinear", q_inputs, ["q"], name="q", **attributes),
             helper.make_node("DequantizeLinear", dq_inputs, ["dq"], name="dq"),
             helper.make_node("Relu", ["dq"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_fp32_model_builds_fp32():
    found = check_model_precision(models.small_cnn(), "fp32", model_name="cnn.onnx")

    assert found.float_types == {"fp32"} and found.qdq_nodes == 0


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_converted_model_builds_its_precision(precision):
    converted, _ = convert_precision(models.small_cnn(), precision)

    found = check_model_precision(converted, precision, model_name="cnn.onnx")

    assert precision in found.float_types


@pytest.mark.parametrize(("precision", "onnx_name"), [("fp16", "float16"), ("bf16", "bfloat16")])
def test_fp32_model_is_refused_for_a_reduced_precision(precision, onnx_name):
    # The pitfall: TensorRT would silently build an fp32 engine.
    with pytest.raises(EngineBuildError, match=rf"no {onnx_name} tensors.*fp32 engine.*"
                                               r"precision pass"):
        check_model_precision(models.small_cnn(), precision, model_name="cnn.onnx")


def test_converted_model_is_refused_as_fp32_naming_a_tensor():
    converted, _ = convert_precision(models.small_cnn(), "fp16")

    with pytest.raises(EngineBuildError, match=r"fp16 tensors \(e\.g\. '.+'\).*not be fp32"):
        check_model_precision(converted, "fp32", model_name="cnn.onnx")


def test_fp16_model_is_refused_as_bf16():
    converted, _ = convert_precision(models.small_cnn(), "fp16")

    with pytest.raises(EngineBuildError, match="no bfloat16 tensors"):
        check_model_precision(converted, "bf16", model_name="cnn.onnx")


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_model_without_qdq_is_refused_for_int8_and_fp8(precision):
    with pytest.raises(EngineBuildError, match=r"no QuantizeLinear/DequantizeLinear.*no "
                                               r"calibration"):
        check_model_precision(models.small_cnn(), precision, model_name="cnn.onnx")


def test_int8_qdq_model_builds_int8():
    found = check_model_precision(qdq_model(TensorProto.INT8), "int8", model_name="q.onnx")

    assert found.qdq_nodes == 2 and found.qdq_types == {"int8": 2}


def test_fp8_qdq_model_builds_fp8_and_not_int8():
    model = qdq_model(TensorProto.FLOAT8E4M3FN)

    assert check_model_precision(model, "fp8", model_name="q.onnx").qdq_types == {"fp8": 2}
    with pytest.raises(EngineBuildError, match="choose fp8"):
        check_model_precision(model, "int8", model_name="q.onnx")


def test_int8_qdq_model_is_refused_as_fp8():
    with pytest.raises(EngineBuildError, match="none of float8e4m3fn"):
        check_model_precision(qdq_model(TensorProto.INT8), "fp8", model_name="q.onnx")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_qdq_model_is_refused_for_float_precisions(precision):
    with pytest.raises(EngineBuildError, match=r"2 QuantizeLinear/DequantizeLinear.*Set the "
                                               r"job's precision to int8"):
        check_model_precision(qdq_model(TensorProto.INT8), precision, model_name="q.onnx")


def test_qdq_type_from_output_dtype_and_spec_default():
    typed = model_precision(qdq_model(None, output_dtype=TensorProto.FLOAT8E4M3FN))
    default = model_precision(qdq_model(None))

    assert typed.qdq_types["fp8"] == 1  # Q's output_dtype; the DQ's input is not a constant
    assert default.qdq_types == {"uint8": 1, "unknown": 1}


def test_unknown_precision_is_refused():
    with pytest.raises(EngineBuildError, match="'int4' is not supported.*fp32, fp16"):
        check_model_precision(models.small_cnn(), "int4", model_name="cnn.onnx")


def test_model_precision_to_dict_is_json_ready():
    assert model_precision(qdq_model(TensorProto.INT8)).to_dict() == {
        "float_types": ["fp32"], "qdq_nodes": 2, "qdq_types": {"int8": 2}}
