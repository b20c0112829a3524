"""Which original nodes each node of a derived graph came from: fusion provenance.

Three sources.  A node of a model FuseForge fused carries the origin tag the
passes left (optimizer/passes/origins.py). A node ONNX Runtime's NCHWc transformer made is
named after the node or the tensor it replaced, plus "_nchwc": its output stands for that
tensor, unless a ReorderOutput says what it holds. Otherwise (and then), by tensors: a
derived graph (ONNX Runtime's session graph) keeps the names of the tensors it still computes,
a fused node's output named after the last original node it swallowed. So a node's origin is
the set of original nodes between its inputs and its outputs: walk back from each output
through the original graph's producers, stopping at any tensor the derived graph also holds
(another node computes it, or it is an input).

Layout and precision changes that keep a tensor's meaning (NCHWc Reorder*, Q/DQ pairs,
Identity) are looked through: the tensor they produce stands for the one they read (or, for a
ReorderOutput, the one it writes), so a Conv reading a reordered copy is still matched. A node
that only moves or converts a tensor is credited to the original node producing it (or, for a
graph input, to the nodes reading it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import onnx

from optimizer.passes.origins import ORIGIN_KEY, origins_of

__all__ = ["Provenance", "compose", "name_unnamed_nodes", "named_graph", "node_ids",
           "node_provenance"]

# Derived node id -> the original node ids it came from.
Provenance = dict[str, tuple[str, ...]]

# Ops whose output holds the same values as their first input, in another layout or precision.
_SAME_VALUES = frozenset({"ReorderInput", "ReorderOutput", "QuantizeLinear", "DequantizeLinear",
                          "DynamicQuantizeLinear", "Identity", "Cast"})
_MAX_FORWARD_STEPS = 8  # a new tensor's consumers followed this far to find a named output
_ORT_LAYOUT_SUFFIX = "_nchwc"


def node_ids(graph: onnx.GraphProto) -> list[str]:
    """Each node's name, or "<op_type>_<index>" for one without (names are optional in ONNX;
    ONNX Runtime's profiler and this module need one per node)."""
    return [node.name or f"{node.op_type}_{index}" for index, node in enumerate(graph.node)]


def name_unnamed_nodes(graph: onnx.GraphProto) -> bool:
    """Give each unnamed node its `node_ids` name; whether any was unnamed. ONNX Runtime's
    profiler names an unnamed node after its own node index, which no saved graph shows."""
    changed = False
    for node, node_id in zip(graph.node, node_ids(graph), strict=True):
        if not node.name:
            node.name, changed = node_id, True
    return changed


def named_graph(path: Path) -> onnx.GraphProto:
    """The main graph of the model at `path` (weights not read), unnamed nodes named."""
    graph = onnx.load(str(path), load_external_data=False).graph
    name_unnamed_nodes(graph)
    return graph


def compose(first: Provenance, second: Provenance) -> Provenance:
    """Provenance through two derivations: `second` maps onto the nodes `first` maps from.

    >>> compose({"fused": ("conv", "relu")}, {"fused_nchwc": ("fused",)})
    {'fused_nchwc': ('conv', 'relu')}
    """
    return {node: tuple(dict.fromkeys(o for middle in via for o in first.get(middle, ())))
            for node, via in second.items()}


def node_provenance(original: onnx.GraphProto, derived: onnx.GraphProto) -> Provenance:
    """For each node of `derived` (by `node_ids`), the `original` nodes it came from, in the
    original's order; empty where nothing could be traced (a node computing new constants)."""
    original_ids = node_ids(original)
    position = {node_id: i for i, node_id in enumerate(original_ids)}
    producer = {out: i for i, node in enumerate(original.node) for out in node.output if out}
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(original.node):
        for name in node.input:
            if name:
                consumers[name].append(i)
    aliases = _aliases(derived, set(producer) | _graph_inputs(original))
    hinted = _named_after(derived, position, producer)
    for node in derived.node:  # a converted node's output stands for its original's
        hint = hinted.get(node.name)
        if hint is not None and node.output and node.output[0] not in producer:
            aliases.setdefault(node.output[0], original.node[hint].output[0])
    held = {aliases.get(name, name) for node in derived.node for name in (*node.input, *node.output)}
    held |= _graph_inputs(derived)
    derived_consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in derived.node:
        for name in node.input:
            derived_consumers[name].append(node)

    result: dict[str, tuple[str, ...]] = {}
    for node_id, node in zip(node_ids(derived), derived.node, strict=True):
        tagged = [position[o] for o in origins_of(_tag(node)) if o in position]
        if tagged:
            result[node_id] = tuple(original_ids[i] for i in sorted(tagged))
            continue
        outputs = _traced_outputs(node, aliases, producer, derived_consumers)
        found: set[int] = set()
        for output in outputs:
            found |= _upstream(output, producer, original, held - {output})
        if not found and node.op_type in _SAME_VALUES:
            moved = aliases.get(node.output[0], node.output[0]) if node.output else ""
            found = {producer[moved]} if moved in producer else set(consumers.get(moved, ()))
        result[node_id] = tuple(original_ids[i] for i in sorted(found))
    return result


def _tag(node: onnx.NodeProto) -> str:
    return next((p.value for p in node.metadata_props if p.key == ORIGIN_KEY), "")


def _named_after(derived: onnx.GraphProto, position: Mapping[str, int],
                 producer: Mapping[str, int]) -> dict[str, int]:
    """Derived node name -> the original node it is named after ("<node or its output>_nchwc")."""
    found: dict[str, int] = {}
    for node in derived.node:
        if not node.name.endswith(_ORT_LAYOUT_SUFFIX):
            continue
        base = node.name[: -len(_ORT_LAYOUT_SUFFIX)]
        index = position.get(base, producer.get(base))
        if index is not None:
            found[node.name] = index
    return found


def _graph_inputs(graph: onnx.GraphProto) -> set[str]:
    return {value.name for value in graph.input} | {t.name for t in graph.initializer}


def _aliases(derived: onnx.GraphProto, original_tensors: set[str]) -> dict[str, str]:
    """Derived tensor -> the original tensor it holds the values of, through `_SAME_VALUES` ops
    (a ReorderOutput names its output after the original; its input is a copy of that)."""
    aliases: dict[str, str] = {}
    for _ in range(_MAX_FORWARD_STEPS):  # chains (Q -> DQ -> Reorder) resolve in a few sweeps
        before = len(aliases)
        for node in derived.node:
            if node.op_type not in _SAME_VALUES or not node.input or not node.output:
                continue
            source, target = node.input[0], node.output[0]
            source_meaning = aliases.get(source, source)
            if target not in original_tensors and source_meaning in original_tensors:
                aliases[target] = source_meaning
            elif source not in original_tensors and target in original_tensors:
                aliases[source] = target
        if len(aliases) == before:
            break
    return aliases


def _traced_outputs(node: onnx.NodeProto, aliases: Mapping[str, str], producer: Mapping[str, int],
                    derived_consumers: Mapping[str, list[onnx.NodeProto]]) -> set[str]:
    """The original tensors `node` computes: its outputs (through aliases), or for a new
    tensor, the first original-named outputs of the nodes that consume it."""
    found: set[str] = set()
    frontier = [name for name in node.output if name]
    for _ in range(_MAX_FORWARD_STEPS):
        following: list[str] = []
        for name in frontier:
            meaning = aliases.get(name, name)
            if meaning in producer:
                found.add(meaning)
            else:
                following += [out for consumer in derived_consumers.get(name, ())
                              for out in consumer.output if out]
        if found or not following:
            break
        frontier = following
    return found


def _upstream(tensor: str, producer: Mapping[str, int], original: onnx.GraphProto,
              stop: Iterable[str]) -> set[int]:
    """Original nodes from `tensor`'s producer back to (not through) the tensors in `stop`."""
    stops = set(stop)
    found: set[int] = set()
    pending = [tensor]
    while pending:
        name = pending.pop()
        index = producer.get(name)
        if index is None or index in found:
            continue
        found.add(index)
        pending += [i for i in original.node[index].input if i and i not in stops]
    return found
