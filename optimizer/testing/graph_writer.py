"""Small helpers for tests and bench/ that write ONNX graphs node by node: a writer with random
weights, and one-line makers of a model, a typed value and a Constant node."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION

__all__ = ["GraphWriter", "constant", "make_model", "tensor"]


class GraphWriter:
    """Collects nodes and initializers; each method returns the name of the value it made.
    Nodes are named after their output ("n_<output>"), so refusals and errors name them."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"n_{output}", **attrs))
        return output


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto] | None = None,
               opset: int = 17, extra_opsets: list[onnx.OperatorSetIdProto] | None = None,
               ) -> onnx.ModelProto:
    """A model of one graph "g" holding `nodes`, at `opset` of the default domain (and `extra_opsets`)."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    *(extra_opsets or [])])
    model.ir_version = IR_VERSION
    return model


def tensor(name: str, shape: list[int] | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """A graph input's or output's declaration: `name`, element type `elem`, `shape` (None: unknown)."""
    return helper.make_tensor_value_info(name, elem, shape)


def constant(name: str, array: np.ndarray) -> onnx.NodeProto:
    """A Constant node whose output `name` holds `array`."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array))
