"""iter_nodes, iter_tensors and op_histogram reach into subgraphs, attributes and functions."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.model.graphs import iter_nodes, iter_tensors, op_histogram
from optimizer.testing import models


def _model_with_if() -> onnx.ModelProto:
    """mlp plus an If whose then-branch holds a Constant and a sparse initializer."""
    then_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["then_out"],
                          value=numpy_helper.from_array(np.ones(2, np.float32), "then_c"))],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2])])
    then_graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(1, np.float32), "sparse"),
        numpy_helper.from_array(np.zeros(1, np.int64), "sparse_idx"), [4]))
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["fc1.b"], ["else_out"])],
        "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [32])])
    model = models.mlp()
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    model.graph.node.append(helper.make_node("If", ["cond"], ["branch"], then_branch=then_graph,
                                             else_branch=else_graph))
    model.graph.node.append(helper.make_node("Custom", ["output"], ["extra"],
                                             domain="com.example"))
    return model


def test_iter_tensors_reaches_constants_and_sparse_tensors_in_subgraphs():
    names = [tensor.name for tensor in iter_tensors(_model_with_if())]

    assert names[:4] == ["fc1.w", "fc1.b", "fc2.w", "fc2.b"]
    assert {"then_c", "sparse", "sparse_idx"} <= set(names)


def test_iter_nodes_includes_nodes_of_both_branches():
    op_types = [node.op_type for node in iter_nodes(_model_with_if())]

    assert "Constant" in op_types and "Identity" in op_types


def test_op_histogram_counts_ops_and_prefixes_non_default_domains():
    histogram = op_histogram(_model_with_if())

    assert histogram == {"Add": 2, "Constant": 1, "Identity": 1, "If": 1, "MatMul": 2,
                         "Relu": 1, "com.example.Custom": 1}
    assert list(histogram) == sorted(histogram)
