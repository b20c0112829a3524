"""fuseforge.SkipLayerNorm as standard ONNX ops, so ONNX Runtime can run it.

    s = Add(Add(input, skip), bias)
    y = LayerNormalization(s, gamma, beta, axis=-1, epsilon, stash_type=1)      (opset >= 17)
Below opset 17 the normalization is written out in float32 (Cast, ReduceMean, Sub, Mul, Sqrt,
Div) and cast back, which is what stash_type=1 does. The sums are rounded to the input type
between the Adds, as in the subgraph the op replaces.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from optimizer.errors import PassError
from optimizer.plugins.base import SubgraphBuilder

__all__ = ["decompose"]

LAYER_NORM_OPSET = 17


def decompose(b: SubgraphBuilder, node: ir.Node) -> Sequence[ir.Value | None]:
    input_, skip, gamma, beta, bias = node.inputs
    epsilon = node.attributes["epsilon"].as_float()
    total = b.op("Add", [b.op("Add", [input_, skip]), bias])
    if b.opset >= LAYER_NORM_OPSET:
        output = b.op("LayerNormalization", [total, gamma, beta],
                      {"axis": -1, "epsilon": epsilon, "stash_type": 1})
        return [output, total]
    dtype = input_.dtype if input_ is not None else None
    if dtype is None:
        raise PassError(
            f"cannot decompose SkipLayerNorm '{node.name}' below opset {LAYER_NORM_OPSET}: the "
            f"type of its input is unknown (run shape inference first)")
    as_float = {"to": ir.DataType.FLOAT.value}
    values = b.op("Cast", [total], as_float)
    mean = b.op("ReduceMean", [values], {"axes": [-1], "keepdims": 1})
    centred = b.op("Sub", [values, mean])
    variance = b.op("ReduceMean", [b.op("Mul", [centred, centred])], {"axes": [-1], "keepdims": 1})
    std = b.op("Sqrt", [b.op("Add", [variance, b.constant(np.array(epsilon, np.float32))])])
    scaled = b.op("Mul", [b.op("Div", [centred, std]), b.op("Cast", [gamma], as_float)])
    shifted = b.op("Add", [scaled, b.op("Cast", [beta], as_float)])
    return [b.op("Cast", [shifted], {"to": dtype.value}), total]
