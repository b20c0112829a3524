"""Rank a quantized model's nodes by how much error each adds.

The fp32 graph and its QDQ form share the names of every original tensor: a quantized node
still computes its float output from the dequantized values of its inputs. So for each node the
error it adds is its output's error against fp32 less the worst error of what it reads
(normalised RMS error, over a few samples): a node that amplifies the error upstream ranks
high, one that only passes it on ranks low. Keeping the top nodes in float restores the most
accuracy for the fewest nodes; the search (search.py) confirms each by measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from optimizer.validation.intermediates import intermediate_values

__all__ = ["NodeSensitivity", "rank_nodes"]

_CHUNK = 48  # tensors read per session: bounds the activations held at once


@dataclass(frozen=True)
class NodeSensitivity:
    name: str
    op_type: str
    added_error: float  # its output's normalised RMS error less its inputs' worst


def rank_nodes(fp32: onnx.ModelProto, quantized: onnx.ModelProto,
               feeds: Sequence[Mapping[str, np.ndarray]]) -> list[NodeSensitivity]:
    """The nodes of `fp32` that `quantized` quantized (they read a DequantizeLinear), most
    error added first."""
    dequantized = {output for node in quantized.graph.node if node.op_type == "DequantizeLinear"
                   for output in node.output}
    weights = {init.name for init in fp32.graph.initializer}
    quantized_nodes = {node.name: node for node in quantized.graph.node
                       if node.name and any(name in dequantized for name in node.input)}
    fp32_nodes = [node for node in fp32.graph.node if node.name in quantized_nodes]
    produced = {out for node in fp32.graph.node for out in node.output}
    # What each quantized node reads, in fp32 and in the QDQ graph (activations only).
    reads: dict[str, list[tuple[str, str]]] = {}
    for node in fp32_nodes:
        pairs = []
        for fp32_input, qdq_input in zip(node.input, quantized_nodes[node.name].input,
                                         strict=False):
            if fp32_input in produced and fp32_input not in weights:
                pairs.append((fp32_input, qdq_input))
        reads[node.name] = pairs
    fp32_names = sorted({node.output[0] for node in fp32_nodes}
                        | {a for pairs in reads.values() for a, _ in pairs})
    qdq_names = sorted({node.output[0] for node in fp32_nodes}
                       | {b for pairs in reads.values() for _, b in pairs})
    reference = _read(fp32, fp32_names, feeds)
    candidate = _read(quantized, qdq_names, feeds)
    ranked = []
    for node in fp32_nodes:
        out = node.output[0]
        error_out = _nrmse(reference[out], candidate.get(out))
        error_in = max((_nrmse(reference[a], candidate.get(b)) for a, b in reads[node.name]),
                       default=0.0)
        ranked.append(NodeSensitivity(node.name, node.op_type, error_out - error_in))
    return sorted(ranked, key=lambda item: -item.added_error)


def _read(model: onnx.ModelProto, names: list[str], feeds: Sequence[Mapping[str, np.ndarray]]
          ) -> dict[str, list[np.ndarray]]:
    made = {out for node in model.graph.node for out in node.output}
    names = [name for name in names if name in made]
    values: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(names), _CHUNK):
        chunk = names[start:start + _CHUNK]
        for sample in intermediate_values(model, chunk, feeds):
            for name in chunk:
                values.setdefault(name, []).append(np.asarray(sample[name], dtype=np.float64))
    return values


def _nrmse(reference: list[np.ndarray], candidate: list[np.ndarray] | None) -> float:
    if candidate is None:
        return 0.0
    error = sum(float(np.sum((c - r) ** 2)) for r, c in zip(reference, candidate, strict=True))
    scale = sum(float(np.sum(r ** 2)) for r in reference)
    return float(np.sqrt(error / scale)) if scale > 0 else float(np.sqrt(error))
