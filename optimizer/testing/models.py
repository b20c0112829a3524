"""Tiny ONNX models built in code with random weights, and one as large as asked, for tests
and benchmarks."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "IR_VERSION", "NP_TO_ONNX", "OPSET", "declared_dims", "large_model", "mlp", "model_bytes",
    "small_cnn", "token_embedding",
]

OPSET = 17
# helper.make_model stamps the newest IR version this onnx knows, which can be newer than
# onnxruntime loads; 10 covers opset 17 and loads in every onnxruntime we support.
IR_VERSION = 10
# The element types the builders write, by the numpy dtype a test asks for.
NP_TO_ONNX: dict[type, int] = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def small_cnn(seed: int = 0, batch: int | str = "N") -> onnx.ModelProto:
    """A residual CNN: input "input" [batch, 3, 32, 32] float32 -> output "logits" [batch, 10].

    Conv -> BatchNormalization -> Relu -> Conv -> BatchNormalization -> Add (residual)
    -> Relu -> GlobalAveragePool -> Flatten -> Gemm. The BatchNormalization statistics are
    random (running variance positive) so a fold that ignores them changes the outputs.
    """
    rng = np.random.default_rng(seed)
    channels = 8
    initializers = [
        _tensor("conv1.w", rng.normal(0, 0.3, (channels, 3, 3, 3))),
        _tensor("conv1.b", rng.normal(0, 0.1, channels)),
        *_batch_norm_params("bn1", rng, channels),
        _tensor("conv2.w", rng.normal(0, 0.2, (channels, channels, 3, 3))),
        _tensor("conv2.b", rng.normal(0, 0.1, channels)),
        *_batch_norm_params("bn2", rng, channels),
        _tensor("fc.w", rng.normal(0, 0.3, (10, channels))),
        _tensor("fc.b", rng.normal(0, 0.1, 10)),
    ]
    bn_inputs = ["scale", "bias", "mean", "var"]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.w", "conv1.b"], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", *[f"bn1.{p}" for p in bn_inputs]],
                         ["b1"], name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2",
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", *[f"bn2.{p}" for p in bn_inputs]],
                         ["b2"], name="bn2", epsilon=1e-5),
        helper.make_node("Add", ["b2", "r1"], ["sum"], name="residual"),
        helper.make_node("Relu", ["sum"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializers,
    )
    return _model(graph)


def mlp(seed: int = 0) -> onnx.ModelProto:
    """Two dense layers: input "input" [N, 16] float32 -> output "output" [N, 4].

    MatMul -> Add -> Relu -> MatMul -> Add.
    """
    rng = np.random.default_rng(seed)
    initializers = [
        _tensor("fc1.w", rng.normal(0, 0.3, (16, 32))),
        _tensor("fc1.b", rng.normal(0, 0.1, 32)),
        _tensor("fc2.w", rng.normal(0, 0.3, (32, 4))),
        _tensor("fc2.b", rng.normal(0, 0.1, 4)),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "fc1.w"], ["m1"], name="fc1"),
        helper.make_node("Add", ["m1", "fc1.b"], ["a1"], name="fc1_bias"),
        helper.make_node("Relu", ["a1"], ["h"], name="relu"),
        helper.make_node("MatMul", ["h", "fc2.w"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "fc2.b"], ["output"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])],
        initializers,
    )
    return _model(graph)


def large_model(megabytes: int, seed: int | None = None) -> onnx.ModelProto:
    """y = x + ReduceSum(w), x and y float32 [1], w a float32 initializer of `megabytes` MB:
    valid, about that large, and loading it needs that much new memory. w is zeros when `seed`
    is None, standard normal from `seed` otherwise. Not run through the checker (it would copy
    the whole model)."""
    count = megabytes * 2**20 // 4
    weights = (np.zeros(count, np.float32) if seed is None
               else np.random.default_rng(seed).standard_normal(count, np.float32))
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["w"], ["s"], keepdims=0),
         helper.make_node("Add", ["x", "s"], ["y"])],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def model_bytes(model: onnx.ModelProto) -> bytes:
    """The serialized protobuf, as an upload would carry it."""
    data: bytes = model.SerializeToString()
    return data


def token_embedding(ids_dims: list[int | str | None], mask_dims: list[int | str | None],
                    out_dims: list[int | str | None], seed: int = 7) -> onnx.ModelProto:
    """ids int64 and mask float32 (dims as given) -> embedding(ids) * mask, out [..., 4]: two
    inputs that share their batch and sequence dims, for dynamic-shape tests."""
    table = np.random.default_rng(seed).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["embedded"]),
         helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
         helper.make_node("Mul", ["embedded", "mask3"], ["out"])],
        "tokens",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ids_dims),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, mask_dims)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_dims)],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.array([-1], np.int64), "last")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def declared_dims(value: onnx.ValueInfoProto) -> list[int | str]:
    """A graph input's or output's declared dims: dim_param names and dim_value sizes."""
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value.type.tensor_type.shape.dim]


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="fuseforge-tests",
        producer_version="0.1",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _batch_norm_params(prefix: str, rng: np.random.Generator,
                       channels: int) -> list[onnx.TensorProto]:
    return [
        _tensor(f"{prefix}.scale", rng.uniform(0.5, 1.5, channels)),
        _tensor(f"{prefix}.bias", rng.normal(0, 0.1, channels)),
        _tensor(f"{prefix}.mean", rng.normal(0, 0.2, channels)),
        _tensor(f"{prefix}.var", rng.uniform(0.5, 2.0, channels)),
    ]


def _tensor(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.float32), name)
