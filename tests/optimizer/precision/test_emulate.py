"""emulate_precision: float32 compute, every low-precision tensor rounded, names kept."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from optimizer.precision import NO_KEEP, convert_precision, emulate_precision, run_outputs
from tests.optimizer.precision.models import finish, loud_layer_norm, tensor

NUMPY_LOW = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def square_then_add(precision: str) -> onnx.ModelProto:
    """y = x * x + c, converted to `precision` with float32 graph I/O."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("Add", ["sq", "c"], ["y"], name="add")]
    model = finish(nodes, [tensor("c", np.full(6, 0.1))], [("x", TensorProto.FLOAT, [6])],
                   [("y", TensorProto.FLOAT, [6])], opset=17)
    return convert_precision(model, precision, keep_fp32=NO_KEEP)[0]  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_emulation_rounds_every_low_precision_tensor(precision: str) -> None:
    low = NUMPY_LOW[precision]
    x = np.array([300.0, 1.00049, -2.7182817, 0.3333333, 1e-9, 255.9], np.float32)
    (out,) = run_outputs(emulate_precision(square_then_add(precision)), [{"x": x}])
    xl = x.astype(low).astype(np.float32)
    with np.errstate(over="ignore"):
        square = (xl * xl).astype(low).astype(np.float32)
        c = np.float32(np.float32(0.1).astype(low))
        expected = (square + c).astype(low).astype(np.float32)
    np.testing.assert_array_equal(out["y"], expected)
    assert out["y"].dtype == np.float32
    if precision == "fp16":
        assert np.isinf(out["y"][0])  # 300² = 90000 > 65504


def test_emulated_model_is_float32_and_keeps_every_tensor_name() -> None:
    converted = square_then_add("fp16")
    emulated = emulate_precision(converted)
    onnx.checker.check_model(emulated, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(emulated).graph
    float_types = {v.type.tensor_type.elem_type
                   for v in (*inferred.input, *inferred.output, *inferred.value_info)}
    assert TensorProto.FLOAT16 in float_types  # only inside the rounding pairs
    names = {out for node in emulated.graph.node for out in node.output}
    assert {"sq", "y"} <= names
    for value in (*inferred.input, *inferred.output):
        assert value.type.tensor_type.elem_type == TensorProto.FLOAT


def test_onnxruntime_cpu_hides_float16_overflow_that_the_emulation_shows() -> None:
    # Why the emulation exists: onnxruntime's CPU provider has no float16 Exp, so it runs Exp in
    # float32 and drops the surrounding Casts, returning exp(11.5) = 98716 where float16 is inf.
    nodes = [helper.make_node("Exp", ["x"], ["y"], name="exp")]
    model = finish(nodes, [], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])],
                   opset=17)
    converted, _ = convert_precision(model, "fp16", keep_fp32=NO_KEEP)
    x = np.array([1.0, 11.0, 11.5], np.float32)
    session = ort.InferenceSession(converted.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (direct,) = session.run(None, {"x": x})
    (emulated,) = run_outputs(emulate_precision(converted), [{"x": x}])
    with np.errstate(over="ignore"):
        true_fp16 = np.exp(x).astype(np.float16)
    assert np.isfinite(direct[2])
    assert np.isinf(emulated["y"][2]) and np.isinf(true_fp16[2])
    np.testing.assert_allclose(emulated["y"][:2], true_fp16[:2].astype(np.float32), rtol=1e-3)


def test_layer_normalization_in_float16_is_expanded_with_rounded_statistics() -> None:
    converted, _ = convert_precision(loud_layer_norm("op"), "fp16", keep_fp32=NO_KEEP)
    emulated = emulate_precision(converted)
    onnx.checker.check_model(emulated, full_check=True)
    ops = [node.op_type for node in emulated.graph.node]
    assert "LayerNormalization" not in ops
    assert ops.count("ReduceMean") == 2 and "Sqrt" in ops and "Reciprocal" in ops
    assert "n" in {out for node in emulated.graph.node for out in node.output}


def test_float32_layer_normalization_is_left_alone() -> None:
    converted, _ = convert_precision(loud_layer_norm("op"), "fp16")
    ops = [node.op_type for node in emulate_precision(converted).graph.node]
    assert ops.count("LayerNormalization") == 1


def test_low_precision_graph_io_becomes_float32_rounded_on_entry() -> None:
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"], name="mul")]
    model = finish(nodes, [tensor("k", np.full(2, 3.0))], [("x", TensorProto.FLOAT, [2])],
                   [("y", TensorProto.FLOAT, [2])], opset=17)
    converted, _ = convert_precision(model, "bf16", keep_io_types=False)
    emulated = emulate_precision(converted)
    boundary = (*emulated.graph.input, *emulated.graph.output)
    assert [v.type.tensor_type.elem_type for v in boundary] == [TensorProto.FLOAT] * 2
    x = np.array([1.00390625 + 2**-9, 7.0], np.float32)  # the first is not a bfloat16
    (out,) = run_outputs(emulated, [{"x": x}])
    low = ml_dtypes.bfloat16
    expected = (x.astype(low).astype(np.float32) * 3.0).astype(low).astype(np.float32)
    np.testing.assert_array_equal(out["y"], expected)
