"""A stack of MatMul+Add+LayerNorm blocks of any width, for models with external data: small
ones for tests, a 2.5 GB one for bench/large_model.py. Weights are random and generated a
block at a time, so the bench never holds a second copy of the whole model."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION, OPSET

__all__ = ["block_stack", "block_weight_bytes"]


def block_weight_bytes(hidden: int) -> int:
    """The bytes of one block's weights: W [hidden, hidden], its bias, gamma and beta."""
    return 4 * (hidden * hidden + 3 * hidden)


def block_stack(blocks: int = 3, *, hidden: int = 64, tokens: int = 8,
                seed: int = 0) -> onnx.ModelProto:
    """input [1, tokens, hidden] -> `blocks` x (MatMul W, Add bias, LayerNorm written out as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, Relu) -> output. Biases, gammas and
    betas are random: a fusion that drops one changes the output."""
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "epsilon")]
    x = "input"
    for block, (matrix, bias, gamma, beta) in enumerate(_block_weights(blocks, hidden, seed)):
        name = f"block{block}"
        weights += [numpy_helper.from_array(matrix, f"{name}.w"),
                    numpy_helper.from_array(bias, f"{name}.b"),
                    numpy_helper.from_array(gamma, f"{name}.gamma"),
                    numpy_helper.from_array(beta, f"{name}.beta")]
        del matrix  # the TensorProto holds its own copy of the bytes
        def at(value: str, name: str = name) -> str:
            return f"{name}.{value}"

        steps = [("MatMul", [x, at("w")], "mm"), ("Add", [at("mm"), at("b")], "biased"),
                 ("ReduceMean", [at("biased")], "mean"),
                 ("Sub", [at("biased"), at("mean")], "centred"),
                 ("Pow", [at("centred"), "two"], "squared"),
                 ("ReduceMean", [at("squared")], "var"),
                 ("Add", [at("var"), "epsilon"], "var_eps"), ("Sqrt", [at("var_eps")], "std"),
                 ("Div", [at("centred"), at("std")], "normed"),
                 ("Mul", [at("normed"), at("gamma")], "scaled"),
                 ("Add", [at("scaled"), at("beta")], "shifted"), ("Relu", [at("shifted")], "out")]
        for op, inputs, output in steps:
            node = helper.make_node(op, inputs, [at(output)], name=f"{name}/{output}")
            if op == "ReduceMean":  # (opset 17: axes is an attribute)
                node.attribute.extend([helper.make_attribute("axes", [-1]),
                                       helper.make_attribute("keepdims", 1)])
            nodes.append(node)
        x = f"{name}.out"
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(
        nodes, "block_stack",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, tokens, hidden])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, tokens, hidden])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fuseforge-tests", producer_version="0.1")
    model.ir_version = IR_VERSION
    return model


def _block_weights(blocks: int, hidden: int, seed: int
                   ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    for _ in range(blocks):
        # Scaled so each block's output stays O(1): the LayerNorm renormalizes anyway.
        matrix = rng.standard_normal((hidden, hidden), np.float32)
        matrix *= np.float32(1 / np.sqrt(hidden))
        yield (matrix, rng.normal(0, 0.5, hidden).astype(np.float32),
               rng.uniform(0.5, 1.5, hidden).astype(np.float32),
               rng.normal(0, 0.5, hidden).astype(np.float32))
