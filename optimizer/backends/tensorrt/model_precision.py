"""Check that an ONNX model carries the precision a TensorRT job asks for, before building.

FuseForge builds strongly typed networks (always so on TensorRT 11.x, by flag on 10.x), so an
engine computes in the types the ONNX graph declares: float16 and bfloat16 come from the
mixed-precision pass, int8 and fp8 from QuantizeLinear/DequantizeLinear nodes. No builder flag
can change that, and a float32 graph silently builds a float32 engine whatever the job said
(../shared/tensorrt-stubs/API-NOTES.md §1). This module reads the types and refuses a mismatch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from optimizer.errors import EngineBuildError
from optimizer.model.graphs import iter_nodes, iter_tensors
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import PRECISIONS, Precision

__all__ = ["ModelPrecision", "check_model_precision", "model_precision"]

_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16",
    TensorProto.DOUBLE: "fp64", TensorProto.INT8: "int8", TensorProto.UINT8: "uint8",
    TensorProto.FLOAT8E4M3FN: "fp8", TensorProto.INT4: "int4", TensorProto.UINT4: "uint4",
    TensorProto.FLOAT4E2M1: "fp4",
}
# The type names below are the registry's precision names where one exists (Precision is a
# StrEnum: Precision.FP16 == "fp16"), and TensorProto's otherwise.
_FLOATS = frozenset({Precision.FP32, Precision.FP16, Precision.BF16})
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_ONNX_DOMAINS = frozenset({"", "ai.onnx"})
_ONNX_NAME = {Precision.FP16: "float16", Precision.BF16: "bfloat16"}


@dataclass(frozen=True)
class ModelPrecision:
    """The floating types a model's tensors use and its Q/DQ nodes' quantized types.

    `examples` names one tensor (or Cast node) per floating type, for messages. A Q/DQ node's
    type comes from its zero point, its `output_dtype` attribute or its constant input;
    "unknown" when none of them says.
    """

    float_types: frozenset[str]
    qdq_nodes: int
    qdq_types: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"float_types": sorted(self.float_types), "qdq_nodes": self.qdq_nodes,
                "qdq_types": dict(sorted(self.qdq_types.items()))}


def model_precision(model: onnx.ModelProto) -> ModelPrecision:
    """Read the types of `model` (tensor data is not needed: external data may stay unloaded)."""
    examples: dict[str, str] = {}
    for name, type_name in _typed_names(model):
        if type_name in _FLOATS:
            examples.setdefault(type_name, name)
    constants = {tensor.name: tensor.data_type for tensor in model.graph.initializer}
    for node in iter_nodes(model):
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.HasField("t"):
                    constants[node.output[0]] = attribute.t.data_type
    qdq_types: Counter[str] = Counter()
    for node in iter_nodes(model):
        if node.op_type in _QDQ_OPS and node.domain in _ONNX_DOMAINS:
            qdq_types[_qdq_type(node, constants)] += 1
    return ModelPrecision(float_types=frozenset(examples), qdq_nodes=sum(qdq_types.values()),
                          qdq_types=qdq_types, examples=examples)


def check_model_precision(model: onnx.ModelProto, precision: str, *,
                          model_name: str) -> ModelPrecision:
    """Refuse to build `precision` from a model whose types say otherwise; returns its types.

    - fp32: no float16/bfloat16 tensors and no Q/DQ nodes;
    - fp16 / bf16: some tensor of that type (the converted graph), no Q/DQ nodes;
    - int8: Q/DQ nodes, not all of them fp8; fp8: Q/DQ nodes of type float8e4m3fn.

    Raises:
        EngineBuildError: `precision` is not one of fp32, fp16, bf16, int8, fp8, or the model
            does not carry it; the message names what was found and what would work.
    """
    choices = BACKENDS[Backend.TENSORRT].precisions
    if precision not in choices:
        raise EngineBuildError(
            f"TensorRT precision {precision!r} is not supported; choose one of "
            f"{', '.join(choices)}.")
    asked = Precision(precision)
    found = model_precision(model)
    reduced = sorted(found.float_types - {Precision.FP32})
    if not PRECISIONS[asked].quantizes and found.qdq_nodes:
        raise EngineBuildError(
            f"Model {model_name!r} carries {found.qdq_nodes} QuantizeLinear/DequantizeLinear "
            f"node(s) ({_types(found)}), so TensorRT would build a quantized engine, but the "
            f"job asks for {precision}. Set the job's precision to "
            f"{Precision.FP8 if found.qdq_types.get(Precision.FP8) else Precision.INT8}, or "
            "upload the model without Q/DQ nodes.")
    if asked is Precision.FP32 and reduced:
        example = found.examples[reduced[0]]
        raise EngineBuildError(
            f"Model {model_name!r} has {'/'.join(reduced)} tensors (e.g. {example!r}), and "
            "TensorRT computes in the types the graph declares, so the engine would not be "
            f"fp32. Set the job's precision to {reduced[0]}, or upload a float32 model.")
    if asked in _ONNX_NAME and asked not in found.float_types:
        raise EngineBuildError(
            f"Model {model_name!r} has no {_ONNX_NAME[asked]} tensors, and TensorRT "
            "builds strongly typed (precision comes from the ONNX types; there is no "
            f"{precision} builder flag), so it would build an fp32 engine. Build from the "
            f"model converted to {precision} by FuseForge's precision pass (the job's "
            f"optimize step does this when its precision is {precision}).")
    if PRECISIONS[asked].quantizes and not found.qdq_nodes:
        raise EngineBuildError(
            f"Model {model_name!r} has no QuantizeLinear/DequantizeLinear nodes, and TensorRT "
            f"builds {precision} only from explicitly quantized models (no calibration). "
            f"Quantize the model first (e.g. with NVIDIA ModelOpt), or choose fp32, fp16 or "
            "bf16.")
    if asked is Precision.FP8 and not found.qdq_types.get(Precision.FP8):
        raise EngineBuildError(
            f"Model {model_name!r} has Q/DQ nodes of type(s) {_types(found)} but none of "
            "float8e4m3fn, so TensorRT would not build fp8. Choose int8, or quantize to "
            "float8e4m3fn.")
    if asked is Precision.INT8 and set(found.qdq_types) == {Precision.FP8}:
        raise EngineBuildError(
            f"Model {model_name!r} quantizes only to float8e4m3fn ({found.qdq_nodes} Q/DQ "
            "nodes); choose fp8, or quantize to int8.")
    return found



def _typed_names(model: onnx.ModelProto) -> Iterator[tuple[str, str]]:
    graph = model.graph
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type"):
            yield value.name, _type_name(value.type.tensor_type.elem_type)
    for tensor in iter_tensors(model):
        yield tensor.name or "(unnamed constant)", _type_name(tensor.data_type)
    for node in iter_nodes(model):
        if node.op_type in ("Cast", "CastLike") and node.domain in _ONNX_DOMAINS:
            for attribute in node.attribute:
                if attribute.name == "to":
                    yield f"Cast node {node.name or node.output[0]!r}", _type_name(attribute.i)


def _qdq_type(node: onnx.NodeProto, constants: dict[str, int]) -> str:
    # QuantizeLinear(x, scale, zero_point) / DequantizeLinear(x, scale, zero_point): the zero
    # point (or, from opset 21, Q's output_dtype) fixes the quantized type; a Q without either
    # is uint8 by the spec; a DQ's quantized input is usually a constant (weights).
    if len(node.input) > 2 and node.input[2] in constants:
        return _type_name(constants[node.input[2]])
    for attribute in node.attribute:
        if attribute.name == "output_dtype" and attribute.i:
            return _type_name(attribute.i)
    if node.op_type == "QuantizeLinear":
        return "uint8"
    if node.input and node.input[0] in constants:
        return _type_name(constants[node.input[0]])
    return "unknown"


def _type_name(elem_type: int) -> str:
    if elem_type in _NAMES:
        return _NAMES[elem_type]
    try:
        return str(TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return f"elem_type_{elem_type}"


def _types(found: ModelPrecision) -> str:
    return ", ".join(f"{name} x{count}" for name, count in sorted(found.qdq_types.items()))
