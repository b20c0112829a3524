"""checks.refuse_if_removed_outputs_escape: what a rewrite removes may feed only the match; what
it leaves in place (shape tensors, inputs, constants) may feed anything."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.checks import refuse_if_removed_outputs_escape


def _graph(extra_nodes: list[onnx.NodeProto], extra_outputs: list[str]) -> ir.Graph:
    """y = Relu(Reshape(x, Concat(Shape(x)[0:1], [-1]))), the match; `extra_nodes` read from it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["lead"], name="shape", start=0, end=1),
        helper.make_node("Concat", ["lead", "tail"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Relu", ["flat"], ["y"], name="relu"),
        *extra_nodes,
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
               for name in ["y", *extra_outputs]]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])], outputs,
        initializer=[numpy_helper.from_array(np.array([-1], np.int64), "tail")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ir.from_proto(model).graph


def _refusal(graph: ir.Graph) -> str | None:
    by_name = {node.name: node for node in graph}
    result = refuse_if_removed_outputs_escape(
        [by_name["reshape"], by_name["relu"]], may_stay=[by_name["shape"], by_name["concat"]],
        replaced=by_name["relu"].outputs)
    return None if result is None else result.reason


def test_a_shape_tensor_the_match_leaves_in_place_may_have_other_readers() -> None:
    other_view = helper.make_node("Reshape", ["x", "target"], ["other"], name="other_view")
    assert _refusal(_graph([other_view], ["other"])) is None


def test_a_shape_node_read_by_a_kept_shape_node_may_stay() -> None:
    # The Concat dies with the match; the Shape it reads stays for another reader.
    other = helper.make_node("Cast", ["lead"], ["other"], name="other", to=TensorProto.FLOAT)
    assert _refusal(_graph([other], ["other"])) is None


def test_the_replaced_output_may_have_any_readers() -> None:
    twice = helper.make_node("Add", ["y", "y"], ["twice"], name="twice")
    assert _refusal(_graph([twice], ["twice"])) is None


def test_a_removed_intermediate_read_outside_the_match_is_refused() -> None:
    other = helper.make_node("Neg", ["flat"], ["other"], name="neg")
    assert _refusal(_graph([other], ["other"])) == "'flat' (Reshape output) is also used by Neg 'neg'"


def test_a_removed_intermediate_that_is_a_graph_output_is_refused() -> None:
    assert _refusal(_graph([], ["flat"])) == (
        "'flat' (Reshape output) is a graph output, so it must stay computed")


def test_a_kept_shape_node_reading_a_removed_intermediate_is_refused() -> None:
    # The Shape of 'flat' feeds the match's target and another view: it stays, and keeps 'flat'.
    nodes = [helper.make_node("Shape", ["flat"], ["flat_lead"], name="flat_shape", end=1),
             helper.make_node("Reshape", ["x", "flat_lead"], ["other"], name="other_view")]
    graph = _graph(nodes, ["other"])
    by_name = {node.name: node for node in graph}
    result = refuse_if_removed_outputs_escape(
        [by_name["reshape"], by_name["relu"]], may_stay=[by_name["flat_shape"]],
        replaced=by_name["relu"].outputs)
    assert result is not None
    assert result.reason == "'flat' (Reshape output) is also used by Shape 'flat_shape'"
