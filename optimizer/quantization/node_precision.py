""""Was my layer quantized?": the precision each node of the fused model runs at in the engine.

A QDQ model says what should be quantized; what runs is decided by ONNX Runtime when it loads
it, fusing each DequantizeLinear -> op -> QuantizeLinear group into an integer kernel where it
has one (QLinearConv, QGemm, MatMulIntegerToFloat...) and leaving the float op, with its Q/DQ
around it, where it has none. So the report reads the session's own optimized graph (ONNX
Runtime's `optimized_model_filepath`), at the engine's level: a node whose kernel is an integer
one ran in int8; every other node ran in float, with the reason why.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
import onnxruntime as ort

from optimizer.backends.node_precision import NodePrecision, NodePrecisionReport
from optimizer.backends.onnxruntime.runner import PROVIDERS, OptimizationLevel, session_options
from optimizer.backends.tensorrt.inspector import EngineLayer

__all__ = ["CONVERSIONS", "INTEGER_KERNELS", "NodePrecision", "NodePrecisionReport", "engine_node_precisions",
           "tensorrt_node_precisions"]

# ONNX Runtime's kernels that compute in 8-bit integers (contrib ops and ONNX's own).
INTEGER_KERNELS = frozenset({
    "QLinearConv", "QLinearMatMul", "QGemm", "ConvInteger", "MatMulInteger",
    "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QAttention", "QLinearAdd", "QLinearMul",
    "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QLinearConcat", "QLinearWhere", "QLinearReduceMean",
    "QEmbedLayerNormalization", "DynamicQuantizeLSTM", "QLinearConvTranspose",
})
# The conversions between float and int8; they are the price of a boundary, not compute.
CONVERSIONS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
# ONNX Runtime names the kernels it builds after the node they replace, plus a suffix.
_RENAMED = re.compile(r"(_token_\d+|_quant|_QuantizeLinear|_DequantizeLinear)+$")
# Nodes that compute nothing to quantize: they are not listed.
_NOT_COMPUTE = frozenset({"Constant", "Identity", "Shape", "Reshape", "Flatten", "Squeeze",
                          "Unsqueeze", "Transpose", "Gather", "Concat", "Slice", "Cast"})


def engine_node_precisions(fused: onnx.ModelProto, engine_model: Path, *, level: OptimizationLevel,
                           kept: Mapping[str, str] | None = None) -> NodePrecisionReport:
    """The precision each compute node of `fused` (the fp32 graph that was quantized) runs at
    in the engine ONNX Runtime builds from `engine_model` at `level`. `kept` names the nodes
    held in float on purpose, with why (the job's keep lists, the accuracy search)."""
    kernels = _engine_kernels(engine_model, level)
    integer = {_RENAMED.sub("", name): op for name, op in kernels.items() if op in INTEGER_KERNELS}
    written = {node.name for node in onnx.load(engine_model, load_external_data=False).graph.node}
    kept = kept or {}
    nodes = []
    for node in fused.graph.node:
        if node.op_type in _NOT_COMPUTE:
            continue
        kernel = integer.get(node.name) or (None if node.name in written else _FOLDED)
        if kernel is not None:
            nodes.append(NodePrecision(node.name, node.op_type, "int8", kernel, None))
            continue
        reason = kept.get(node.name) or (
            f"ONNX Runtime has no integer kernel for {node.op_type} here: it runs in float "
            "between DequantizeLinear and QuantizeLinear" if node.op_type in _QUANTIZABLE else
            f"{node.op_type} is not quantized (it runs in float on the dequantized values)")
        nodes.append(NodePrecision(node.name, node.op_type, "float", None, reason))
    counts = Counter("int8" if op in INTEGER_KERNELS else "conversion" if op in CONVERSIONS
                     else "float" for op in kernels.values())
    return NodePrecisionReport(nodes=tuple(nodes), kernels=dict(counts))


# A Relu or Clip the quantizer removed: the int8 output's range (its zero point) clips instead.
_FOLDED = "folded into the int8 output range of the op before it"
# The op types FuseForge asks the quantizer to quantize, whose float run needs a reason.
_QUANTIZABLE = frozenset({"Conv", "MatMul", "Gemm", "Add", "Mul", "ConvTranspose",
                          "AveragePool", "GlobalAveragePool", "Attention"})


def _engine_kernels(engine_model: Path, level: OptimizationLevel) -> dict[str, str]:
    """Node name -> op type of the graph ONNX Runtime runs for `engine_model` at `level`."""
    with tempfile.TemporaryDirectory(prefix="fuseforge-kernels-") as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        options = session_options(level, None)
        options.optimized_model_filepath = str(optimized)
        options.log_severity_level = 3  # its note that NCHWc graphs are host-specific is known
        ort.InferenceSession(str(engine_model), sess_options=options, providers=list(PROVIDERS))
        graph = onnx.load(optimized, load_external_data=False).graph
    return {node.name: node.op_type for node in graph.node}


# TensorRT's layer precisions (inspector.py's names) that are quantized ones.
_QUANTIZED_LAYER_TYPES = {"int8": "int8", "fp8": "fp8", "int4": "int4", "fp4": "fp4"}


def tensorrt_node_precisions(fused: onnx.ModelProto, layers: Sequence[EngineLayer], *,
                             kept: Mapping[str, str] | None = None) -> NodePrecisionReport:
    """The precision each compute node of `fused` runs at in a TensorRT engine: that of the
    layer the inspector says computes it (its first computing input's type). A node no layer
    names was folded into a neighbour or removed by TensorRT."""
    layer_of = {node: layer for layer in layers for node in layer.fused_onnx_nodes}
    kept = kept or {}
    nodes = []
    for node in fused.graph.node:
        if node.op_type in _NOT_COMPUTE:
            continue
        layer = layer_of.get(node.name)
        precision = (layer.precision or "unknown").lower() if layer else "unknown"
        if precision in _QUANTIZED_LAYER_TYPES:
            nodes.append(NodePrecision(node.name, node.op_type, _QUANTIZED_LAYER_TYPES[precision],
                                       layer.name if layer else None, None))
            continue
        reason = kept.get(node.name) or (
            f"TensorRT computes it in {precision} (layer {layer.name!r})" if layer else
            "no engine layer names it: TensorRT folded or removed it")
        nodes.append(NodePrecision(node.name, node.op_type, "float", layer.name if layer else None,
                                   reason))
    counts = Counter((layer.precision or "unknown").lower() for layer in layers)
    return NodePrecisionReport(nodes=tuple(nodes), kernels=dict(counts))
