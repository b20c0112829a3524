"""A small helper for tests and bench/ that write ONNX graphs node by node with random weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["GraphWriter"]


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
