"""Loops that provably never end: refused when a model is checked, naming the node, instead of
running until a stage's wall-clock limit.

A `Loop` stops when its trip count is reached or its condition turns false. One whose
condition cannot turn false (its body passes `cond_in` straight through, or sets it to a
constant true) and whose trip count is missing or astronomical (at least 2^32 iterations: at a
microsecond each, over an hour) never ends in practice; a real export gives either a real trip
count or a condition its body computes. A condition computed from data cannot be judged
without running the model: the stage's limits stop such a loop (worker/supervision/).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import numpy_helper

from optimizer.model.graphs import constant_tensors

__all__ = ["ENDLESS_TRIPS", "endless_loops"]

ENDLESS_TRIPS = 2**32  # iterations from which a loop whose condition stays true counts as endless


def endless_loops(model: onnx.ModelProto) -> Iterator[str]:
    """A description of each Loop node (in any graph) that provably never ends."""
    pending: list[tuple[onnx.GraphProto, str]] = [(model.graph, "the main graph")]
    while pending:
        graph, where = pending.pop()
        constants = constant_tensors(graph)
        for index, node in enumerate(graph.node):
            for attribute in node.attribute:
                inner = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                pending.extend((g, f"a body of node {node.name or index!r} in {where}")
                               for g in inner)
            if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
                why = _why_endless(node, constants)
                if why is not None:
                    yield f"Loop node {node.name or f'#{index}'!r} in {where} never ends: {why}"


def _why_endless(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> str | None:
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None or len(body.input) < 2 or not body.output:
        return None
    trips_name = node.input[0] if node.input else ""
    cond_name = node.input[1] if len(node.input) > 1 else ""
    trips = _scalar(constants.get(trips_name)) if trips_name else None
    if trips_name and (trips is None or trips < ENDLESS_TRIPS):
        return None  # a real trip count, or one computed at run time
    if cond_name and _scalar(constants.get(cond_name)) != 1:
        return None  # starts false, or computed at run time
    if not _stays_true(body, body.input[1].name, body.output[0].name):
        return None
    count = f"its trip count is {trips}" if trips_name else "it has no trip count"
    return (f"its condition never turns false (the body passes it through unchanged) and {count}"
            "; export the loop with its real trip count, or a condition its body computes")


def _stays_true(body: onnx.GraphProto, cond_in: str, cond_out: str) -> bool:
    """Whether the body's cond_out is its cond_in (through Identity nodes) or a constant true."""
    producers = {output: node for node in body.node for output in node.output}
    constants = constant_tensors(body)
    name = cond_out
    for _ in range(len(body.node) + 1):
        if name == cond_in:
            return True
        if name in constants:
            return _scalar(constants[name]) == 1
        node = producers.get(name)
        if node is None or node.op_type != "Identity" or not node.input:
            return False
        name = node.input[0]
    return False


def _scalar(tensor: onnx.TensorProto | None) -> int | None:
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        values = numpy_helper.to_array(tensor)
    except (ValueError, TypeError):
        return None
    return int(values.reshape(-1)[0]) if values.size == 1 else None
