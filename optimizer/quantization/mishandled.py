"""Find the quantized nodes a runtime computes wrongly, by bisection.

A Q/DQ graph within the accuracy budget as its operators define it (ONNX Runtime runs it so)
can come out far off in a backend's own runtime, whose rewriting of Q/DQ groups into integer
kernels goes wrong on some pattern: OpenVINO 2026.4 gives PP-OCRv4's detector, quantized by
NNCF, an output cosine of 0.04 where ONNX Runtime gives 0.998, and keeping the one Conv after
its head's Concat in float brings it back to 0.998. The sensitivity ranking (sensitivity.py)
reads intermediate tensors in ONNX Runtime and cannot see such a node. So the search bisects in
the runtime itself: a node's inputs are given back their float values (`float_inputs`, no
re-quantization, so a step costs one compile and one run; an activation keeps its quantizer's
range, as a Clip, for the quantizer may have absorbed a Relu), and the shortest prefix of the
quantized nodes, in graph order, whose float inputs bring the model within budget ends at a
node the runtime mishandles. That repeats, with the nodes found kept in float, up to a limit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from optimizer.model.graphs import constant_tensors

__all__ = ["MAX_MISHANDLED", "find_mishandled", "float_inputs", "quantized_nodes"]

MAX_MISHANDLED = 3  # nodes sought; each costs about log2(quantized nodes) + 1 judgements


def quantized_nodes(model: onnx.ModelProto) -> list[str]:
    """The names of `model`'s nodes that read a DequantizeLinear output, in graph order."""
    dequantized = {node.output[0] for node in model.graph.node
                   if node.op_type == "DequantizeLinear"}
    return [node.name for node in model.graph.node
            if node.name and node.op_type != "QuantizeLinear"
            and any(name in dequantized for name in node.input)]


def float_inputs(model: onnx.ModelProto, names: Collection[str]) -> onnx.ModelProto:
    """A copy of `model` in which the named nodes read, in place of each DequantizeLinear
    output, the float tensor it was quantized from: a QuantizeLinear's input clipped to that
    quantizer's range, or the weight initializer dequantized here. The Q/DQ nodes nothing
    reads any more are removed (OpenVINO's ONNX frontend mistranslates a graph that keeps
    them beside the Clip)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    if not names:
        return result
    graph = result.graph
    producers = {out: node for node in graph.node for out in node.output}
    constants = {name: numpy_helper.to_array(tensor)
                 for name, tensor in constant_tensors(graph).items()}
    floats: dict[str, str] = {}  # a DequantizeLinear's output -> its float source
    clips: dict[str, onnx.NodeProto] = {}  # a QuantizeLinear's output -> the Clip that stands in
    for node in graph.node:
        if node.name not in names:
            continue
        for index, name in enumerate(node.input):
            dequantize = producers.get(name)
            if dequantize is None or dequantize.op_type != "DequantizeLinear":
                continue
            if name not in floats:
                floats[name] = _float_source(dequantize, producers, constants, graph, clips)
            node.input[index] = floats[name]
    if clips:  # each Clip just before its first reader: the graph stays in order
        # (not between the QuantizeLinear and its DequantizeLinear: OpenVINO's ONNX frontend
        # then fails to pair them)
        pending = {clip.output[0]: clip for clip in clips.values()}
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            nodes.extend(pending.pop(name) for name in node.input if name in pending)
            nodes.append(node)
        del graph.node[:]
        graph.node.extend(nodes)
    _drop_unread_qdq(graph)
    return result


def _drop_unread_qdq(graph: onnx.GraphProto) -> None:
    """Remove the QuantizeLinear/DequantizeLinear nodes whose outputs nothing reads."""
    outputs = {value.name for value in graph.output}
    while True:
        read = {name for node in graph.node for name in node.input} | outputs
        kept = [node for node in graph.node
                if node.op_type not in ("QuantizeLinear", "DequantizeLinear")
                or any(name in read for name in node.output)]
        if len(kept) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(kept)


def find_mishandled(order: Sequence[str], within_budget: Callable[[Sequence[str]], bool], *,
                    limit: int = MAX_MISHANDLED) -> list[str]:
    """The nodes of `order` to keep in float, found by bisection, so that `within_budget`
    (judging the model with the nodes given float inputs) holds; [] where giving every node
    of `order` float inputs does not bring it within budget (the runtime's error is elsewhere)
    or `limit` nodes do not suffice."""
    found: list[str] = []
    while len(found) < limit:
        rest = [name for name in order if name not in found]
        if not rest or not within_budget([*found, *rest]):
            return []
        low, high = 0, len(rest)  # a prefix of `high` nodes is within budget, of `low` not
        while high - low > 1:
            middle = (low + high) // 2
            if within_budget([*found, *rest[:middle]]):
                high = middle
            else:
                low = middle
        found.append(rest[high - 1])
        if within_budget(found):
            return found
    return []


def _float_source(dequantize: onnx.NodeProto, producers: dict[str, onnx.NodeProto],
                  constants: dict[str, np.ndarray], graph: onnx.GraphProto,
                  clips: dict[str, onnx.NodeProto]) -> str:
    """The float tensor `dequantize` stands for: its QuantizeLinear's input clipped to the
    quantizer's range, or a new initializer holding its constant input dequantized; its own
    output where its scales are computed or per-axis on an activation (left as it is)."""
    source: str = dequantize.input[0]
    quantize = producers.get(source)
    if quantize is not None and quantize.op_type == "QuantizeLinear":
        return _clipped(quantize, constants, graph, clips) or str(dequantize.output[0])
    if not all(name in constants for name in dequantize.input if name):
        return str(dequantize.output[0])
    values = constants[source].astype(np.float32)
    scale, zero = _scale_and_zero(dequantize, constants)
    if scale.ndim == 1 and scale.size > 1:  # per-axis: scale and zero point along `axis`
        axis = next((a.i for a in dequantize.attribute if a.name == "axis"), 1) % values.ndim
        shape = [1] * values.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), np.reshape(zero, shape) if zero.size > 1 else zero
    name = f"{dequantize.output[0]}/float"
    graph.initializer.append(numpy_helper.from_array(
        ((values - zero) * scale).astype(np.float32), name))
    return name


def _clipped(quantize: onnx.NodeProto, constants: dict[str, np.ndarray],
             graph: onnx.GraphProto, clips: dict[str, onnx.NodeProto]) -> str | None:
    """The name of `quantize`'s input clipped to the range it quantizes to (a Relu the
    quantizer absorbed, and its saturation, without the rounding); None where the scale is
    computed or per-axis."""
    output = str(quantize.output[0])
    if output in clips:
        return str(clips[output].output[0])
    if not all(name in constants for name in quantize.input[1:] if name):
        return None
    scale, zero = _scale_and_zero(quantize, constants)
    if scale.size != 1 or zero.size != 1:
        return None
    has_zero = len(quantize.input) > 2 and quantize.input[2]
    limits = np.iinfo(constants[quantize.input[2]].dtype if has_zero else np.uint8)
    clipped = f"{quantize.input[0]}/in_quantized_range"
    low, high = f"{clipped}_min", f"{clipped}_max"
    graph.initializer.extend([
        numpy_helper.from_array(np.asarray((limits.min - zero) * scale, np.float32), low),
        numpy_helper.from_array(np.asarray((limits.max - zero) * scale, np.float32), high)])
    clips[output] = onnx.helper.make_node("Clip", [quantize.input[0], low, high], [clipped],
                                          name=clipped)
    return clipped


def _scale_and_zero(node: onnx.NodeProto, constants: dict[str, np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A QuantizeLinear's or DequantizeLinear's scale and zero point (0 where absent), as
    float32."""
    scale = constants[node.input[1]].astype(np.float32)
    has_zero = len(node.input) > 2 and node.input[2]
    zero = constants[node.input[2]].astype(np.float32) if has_zero else np.zeros((), np.float32)
    return scale, zero
