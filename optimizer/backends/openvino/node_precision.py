""""Was my layer quantized?" on OpenVINO: the precision each node of the fused model runs at
in the engine OpenVINO's CPU plugin compiles from the int8 Q/DQ model.

OpenVINO decides what runs in int8 when it compiles: its low-precision transformations turn a
DequantizeLinear -> op -> QuantizeLinear group into a u8/i8 kernel where the CPU plugin has one,
and fuse neighbours into it (a Relu, a bias Add, the next QuantizeLinear). The compiled model's
runtime graph says, per executed layer, the precision it ran at (rt_info "runtimePrecision")
and the ops of the converted model it holds ("originalLayersNames"); OpenVINO's ONNX frontend
names those ops after the ONNX node, or the node's name plus "/suffix" for the pieces it splits
a node into ("node_Conv_0/WithoutBiases"), or after the node's output tensor (a graph output's
producer). A node held by a u8/i8 layer ran in int8; every other
node ran in float, with the reason why. Compiled at inference precision f32, as the engine's
float remainder runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import onnx
import openvino as ov

from optimizer.backends.node_precision import NodePrecision, NodePrecisionReport
from optimizer.backends.openvino.candidates import candidate_runner

__all__ = ["RuntimeLayer", "openvino_node_precisions", "runtime_layers"]

_INTEGER = frozenset({"u8", "i8"})
# Layers that only hold, feed or move data between precisions.
_NOT_LAYERS = frozenset({"Input", "Output", "Const"})
_CONVERSIONS = frozenset({"Reorder", "FakeQuantize", "Convert"})
# A Relu or Clip after an int8 layer that no layer names: the int8 output's range clips instead.
_CLIPS = frozenset({"Relu", "Clip"})
_FOLDED = "folded into the int8 output range of the op before it"
# Nodes that compute nothing to quantize: they are not listed (as ONNX Runtime's report).
_NOT_COMPUTE = frozenset({"Constant", "Identity", "Shape", "Reshape", "Flatten", "Squeeze",
                          "Unsqueeze", "Transpose", "Gather", "Concat", "Slice", "Cast"})


class RuntimeLayer:
    """One executed layer of a compiled model: its name, type, precision and the converted
    model's ops it holds."""

    def __init__(self, name: str, layer_type: str, precision: str,
                 original_names: tuple[str, ...], output_precisions: tuple[str, ...]) -> None:
        self.name, self.layer_type, self.precision = name, layer_type, precision
        self.original_names, self.output_precisions = original_names, output_precisions

    @property
    def integer(self) -> bool:
        return self.precision in _INTEGER and self.layer_type not in _CONVERSIONS


def runtime_layers(compiled: ov.CompiledModel) -> list[RuntimeLayer]:
    """The executed layers of `compiled`'s runtime graph, in order (inputs, outputs and
    constants left out)."""
    layers = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer_type = info["layerType"].astype(str)
        if layer_type in _NOT_LAYERS:
            continue
        names = tuple(n for n in info["originalLayersNames"].astype(str).split(",") if n)
        outputs = tuple(p for p in info["outputPrecisions"].astype(str).split(",") if p)
        layers.append(RuntimeLayer(op.get_friendly_name(), layer_type,
                                   info["runtimePrecision"].astype(str), names, outputs))
    return layers


def openvino_node_precisions(fused: onnx.ModelProto, engine_model: Path, *, level: str | None = None,
                             kept: Mapping[str, str] | None = None) -> NodePrecisionReport:
    """The precision each compute node of `fused` (the fp32 graph that was quantized) runs at
    in the engine OpenVINO compiles from `engine_model` (its int8 Q/DQ ONNX, or the IR made
    from it). `kept` names the nodes held in float on purpose, with why. `level` is ONNX
    Runtime's (the report's common signature): OpenVINO has none.
    """
    del level
    with candidate_runner(Path(engine_model), None) as runner:
        layers = runtime_layers(runner.compiled)
    onnx_names = _onnx_names(fused)
    holders: dict[str, list[RuntimeLayer]] = {}
    for executed in layers:
        for node_name in _onnx_nodes(executed.original_names, onnx_names):
            holders.setdefault(node_name, []).append(executed)
    kept = kept or {}
    nodes = []
    int8_outputs: set[str] = set()
    for node in fused.graph.node:
        if node.op_type in _NOT_COMPUTE:
            continue
        held = holders.get(node.name, [])
        integer = next((layer for layer in held if layer.integer), None)
        folded = (not held and node.op_type in _CLIPS and bool(node.input)
                  and node.input[0] in int8_outputs)
        if integer is not None or folded:
            int8_outputs.update(node.output)
            nodes.append(NodePrecision(node.name, node.op_type, "int8", _FOLDED if integer is None
                                       else f"{integer.layer_type} {integer.name}", None))
            continue
        layer: RuntimeLayer | None = next(
            (item for item in held if item.layer_type not in _CONVERSIONS),
            held[0] if held else None)
        reason = kept.get(node.name) or (
            f"OpenVINO runs it in {layer.precision} ({layer.layer_type} layer {layer.name!r})"
            if layer else "no runtime layer names it: OpenVINO folded or removed it")
        nodes.append(NodePrecision(node.name, node.op_type, "float",
                                   f"{layer.layer_type} {layer.name}" if layer else None, reason))
    counts = Counter(_kind(executed, onnx_names) for executed in layers)
    return NodePrecisionReport(nodes=tuple(nodes), kernels=dict(counts))


def _onnx_names(model: onnx.ModelProto) -> dict[str, str]:
    """Each name an op of the converted model may carry -> the ONNX node it came from: the
    nodes' output tensors, then (ahead of them) the nodes' own names."""
    names = {output: node.name for node in model.graph.node if node.name
             for output in node.output if output}
    names.update({node.name: node.name for node in model.graph.node if node.name})
    return names


def _onnx_nodes(original_names: Iterable[str], onnx_names: Mapping[str, str]) -> set[str]:
    """The ONNX nodes the converted model's ops `original_names` came from: each name, or its
    longest prefix before a "/" that names a node or its output ("a/Conv/WithoutBiases" ->
    "a/Conv")."""
    found = set()
    for name in original_names:
        candidate = name
        while candidate and candidate not in onnx_names:
            candidate = candidate.rpartition("/")[0]
        if candidate:
            found.add(onnx_names[candidate])
    return found


def _kind(layer: RuntimeLayer, onnx_names: Mapping[str, str]) -> str:
    """"int8", "conversion" (a layer that changes its data's precision and holds no node of
    the fused model) or "float"."""
    if layer.integer:
        return "int8"
    if layer.layer_type in _CONVERSIONS or (
            not _onnx_nodes(layer.original_names, onnx_names)
            and set(layer.output_precisions) != {layer.precision}):
        return "conversion"
    return "float"
