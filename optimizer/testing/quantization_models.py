"""Models built in code for the int8 tests: a convnet large enough for int8 to pay, one node
that int8 ruins unless it stays in float, and one too small for int8 to pay.

Weights, biases and BatchNormalization statistics are random (a folding that drops one changes
the outputs); activations stay input-dependent (He-initialised convolutions).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION

__all__ = ["calibration_images", "conv_stack", "outlier_channel", "tiny_matmul"]


def conv_stack(seed: int = 0, *, channels: int = 64, size: int = 56, blocks: int = 4,
               classes: int = 10, opset: int = 17) -> onnx.ModelProto:
    """input [1, 3, size, size] -> stem Conv+BN+Relu, `blocks` residual blocks (Conv+BN+Relu,
    Conv+BN, Add, Relu), GlobalAveragePool, Flatten, Gemm -> scores [1, classes]."""
    rng = np.random.default_rng(seed)
    nodes, weights = [], []

    def conv_bn(name: str, x: str, cin: int, cout: int, relu: bool) -> str:
        weights.append(_tensor(f"{name}.w", rng.normal(0, np.sqrt(2 / (cin * 9)),
                                                       (cout, cin, 3, 3))))
        weights.append(_tensor(f"{name}.b", rng.normal(0, 0.1, cout)))
        weights.extend([_tensor(f"{name}.bn.scale", rng.uniform(0.5, 1.5, cout)),
                        _tensor(f"{name}.bn.bias", rng.normal(0, 0.1, cout)),
                        _tensor(f"{name}.bn.mean", rng.normal(0, 0.2, cout)),
                        _tensor(f"{name}.bn.var", rng.uniform(0.5, 2.0, cout))])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.conv"],
                                      name=f"{name}/Conv", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node(
            "BatchNormalization", [f"{name}.conv", *(f"{name}.bn.{p}" for p in
                                                     ("scale", "bias", "mean", "var"))],
            [f"{name}.bn"], name=f"{name}/BatchNormalization"))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"],
                                      name=f"{name}/Relu"))
        return f"{name}.relu"

    x = conv_bn("stem", "input", 3, channels, relu=True)
    for block in range(blocks):
        y = conv_bn(f"block{block}.a", x, channels, channels, relu=True)
        y = conv_bn(f"block{block}.b", y, channels, channels, relu=False)
        nodes.append(helper.make_node("Add", [x, y], [f"block{block}.sum"],
                                      name=f"block{block}/Add"))
        nodes.append(helper.make_node("Relu", [f"block{block}.sum"], [f"block{block}.out"],
                                      name=f"block{block}/Relu"))
        x = f"block{block}.out"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"))
    weights.append(_tensor("fc.w", rng.normal(0, np.sqrt(1 / channels), (classes, channels))))
    weights.append(_tensor("fc.b", rng.normal(0, 0.1, classes)))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["scores"], name="fc",
                                  transB=1))
    return _model(nodes, weights, [1, 3, size, size], [1, classes], opset)


def outlier_channel(seed: int = 0, *, channels: int = 16, size: int = 16) -> onnx.ModelProto:
    """Conv `spread` whose output channel 0 carries a bias of 1000 (every other channel is
    O(1)), then Conv `reader`, which ignores channel 0. One activation scale for the whole
    tensor covers ±1000 and rounds the small channels away, so int8 ruins `reader`'s output
    unless `reader` stays in float (its input is then never quantized)."""
    rng = np.random.default_rng(seed)
    spread_w = rng.normal(0, np.sqrt(2 / 27), (channels, 3, 3, 3))
    spread_b = rng.normal(0, 0.1, channels)
    spread_b[0] = 1000.0
    reader_w = rng.normal(0, np.sqrt(2 / (channels * 9)), (channels, channels, 3, 3))
    reader_w[:, 0] = 0.0
    weights = [_tensor("spread.w", spread_w), _tensor("spread.b", spread_b),
               _tensor("reader.w", reader_w), _tensor("reader.b", rng.normal(0, 0.1, channels))]
    nodes = [
        helper.make_node("Conv", ["input", "spread.w", "spread.b"], ["spread.out"],
                         name="spread", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["spread.out", "reader.w", "reader.b"], ["output"],
                         name="reader", pads=[1, 1, 1, 1]),
    ]
    return _model(nodes, weights, [1, 3, size, size], [1, channels, size, size], 17)


def tiny_matmul(seed: int = 0) -> onnx.ModelProto:
    """input [1, 8] @ W [8, 8] + b: too little work for int8's conversions to pay for."""
    rng = np.random.default_rng(seed)
    weights = [_tensor("w", rng.normal(0, 0.3, (8, 8))), _tensor("b", rng.normal(0, 0.1, 8))]
    nodes = [helper.make_node("MatMul", ["input", "w"], ["product"], name="matmul"),
             helper.make_node("Add", ["product", "b"], ["output"], name="bias")]
    return _model(nodes, weights, [1, 8], [1, 8], 17)


def calibration_images(model: onnx.ModelProto, samples: int, seed: int = 0) -> np.ndarray:
    """`samples` inputs for `model`'s single input, as a dataset array [S, *input shape]."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal((samples, *dims)).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], weights: list[onnx.TensorProto], input_shape: list[int],
           output_shape: list[int], opset: int) -> onnx.ModelProto:
    output = nodes[-1].output[0]
    graph = helper.make_graph(
        nodes, "int8_test", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                           input_shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, output_shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="fuseforge-tests", producer_version="0.1")
    model.ir_version = min(IR_VERSION, 7) if opset < 13 else IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _tensor(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.float32), name)
