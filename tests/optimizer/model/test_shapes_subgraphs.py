"""fix_input_shapes reaches into subgraphs: shapes an exporter recorded inside If branches for
other input shapes are recomputed, not trusted."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from optimizer.model.shapes import fix_input_shapes
from optimizer.testing.models import IR_VERSION
from optimizer.testing.passes import run_model


def _branch(name: str, op: str, recorded_batch: int) -> onnx.GraphProto:
    # Records shapes for batch `recorded_batch`, as an export traced at that batch would.
    return helper.make_graph(
        [helper.make_node(op, ["x"], [f"{name}_mid"]),
         helper.make_node("Neg", [f"{name}_mid"], [f"{name}_out"])],
        name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [recorded_batch, 8])],
        value_info=[helper.make_tensor_value_info(f"{name}_mid", TensorProto.FLOAT,
                                                  [recorded_batch, 8])])


def _if_model(recorded_batch: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         helper.make_node("Constant", [], ["zero"], value=helper.make_tensor(
             "zero", TensorProto.FLOAT, [], [0.0])),
         helper.make_node("Greater", ["total", "zero"], ["positive"]),
         helper.make_node("If", ["positive"], ["y"],
                          then_branch=_branch("then", "Relu", recorded_batch),
                          else_branch=_branch("else", "Sigmoid", recorded_batch))],
        "if_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = IR_VERSION
    return model


def _branch_shapes(model: onnx.ModelProto) -> list[list[int]]:
    node = next(node for node in model.graph.node if node.op_type == "If")
    values = [value for attribute in node.attribute
              for value in (*attribute.g.value_info, *attribute.g.output)]
    return [[dim.dim_value for dim in value.type.tensor_type.shape.dim] for value in values]


def test_fix_input_shapes_recomputes_shapes_recorded_inside_if_branches() -> None:
    model = _if_model(recorded_batch=4)

    fixed = fix_input_shapes(model, {"x": [2, 8]})

    assert _branch_shapes(fixed) and all(shape == [2, 8] for shape in _branch_shapes(fixed))
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    expected = -np.maximum(x, 0) if x.sum() > 0 else -1 / (1 + np.exp(-x))
    np.testing.assert_allclose(run_model(fixed, {"x": x})[0], expected, rtol=1e-6)
    onnx.checker.check_model(fixed, full_check=True)
