"""fuseforge.BiasGelu as standard ONNX ops, so ONNX Runtime can run it.

    x = Add(input, bias)
    "none":  Mul(Mul(x, 0.5), Add(Erf(Div(x, √2)), 1))
    "tanh":  Mul(Mul(x, 0.5), Add(Tanh(Mul(√(2/π), Add(x, Mul(0.044715, Mul(Mul(x, x), x))))), 1))
written out (any opset), in the input's type, as exporters write GELU below opset 20.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from optimizer.errors import PassError
from optimizer.plugins.base import SubgraphBuilder

__all__ = ["decompose"]


def decompose(b: SubgraphBuilder, node: ir.Node) -> Sequence[ir.Value | None]:
    input_, bias = node.inputs
    approximate = node.attributes["approximate"].as_string()
    dtype = input_.dtype if input_ is not None else None
    if dtype is None:
        raise PassError(f"cannot decompose BiasGelu '{node.name}': the type of its input is "
                        "unknown (run shape inference first)")
    numpy_type = dtype.numpy()

    def constant(number: float) -> ir.Value:
        return b.constant(np.array(number, dtype=numpy_type))

    x = b.op("Add", [input_, bias])
    if approximate == "none":
        activated = b.op("Erf", [b.op("Div", [x, constant(math.sqrt(2.0))])])
    else:
        cube = b.op("Mul", [b.op("Mul", [x, x]), x])
        inner = b.op("Add", [x, b.op("Mul", [constant(0.044715), cube])])
        activated = b.op("Tanh", [b.op("Mul", [constant(math.sqrt(2.0 / math.pi)), inner])])
    half_x = b.op("Mul", [x, constant(0.5)])
    return [b.op("Mul", [half_x, b.op("Add", [activated, constant(1.0)])])]
