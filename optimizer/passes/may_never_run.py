"""Which subgraphs may never run: the code folding and inlining leave as it is.

A branch of an If whose condition is not a constant, and the body of a Loop that may run zero
times (its trip count or first condition is not a constant that makes it run), may hold code
that cannot run at the model's shapes (silero-vad's 8 kHz branch at 16 kHz sizes), and is never
asked to. Folding it at those shapes writes constants that contradict it: ONNX Runtime then
refuses the model at load even with graph optimizations disabled.
"""

from __future__ import annotations

import onnx_ir as ir

from optimizer.passes.matching import ONNX_DOMAINS

__all__ = ["constant_if", "graphs_that_may_never_run", "may_skip_its_bodies"]


def constant_if(node: ir.Node) -> bool:
    """Whether `node` (an If) has a constant condition (an input initializer is no constant)."""
    condition = node.inputs[0] if node.inputs else None
    return condition is not None and condition.const_value is not None \
        and not condition.is_graph_input()


def may_skip_its_bodies(node: ir.Node) -> bool:
    """Whether `node` is an If with an open condition or a Loop that may not run its body."""
    if node.domain not in ONNX_DOMAINS:
        return False
    if node.op_type == "If":
        return not constant_if(node)
    if node.op_type != "Loop":
        return False
    trips = node.inputs[0] if node.inputs else None
    first = node.inputs[1] if len(node.inputs) > 1 else None
    return not (_constant_at_least(trips, 1) and _constant_at_least(first, 1))


def graphs_that_may_never_run(model: ir.Model) -> set[ir.Graph]:
    """The subgraphs of `model` that `may_skip_its_bodies` nodes own, nested ones too."""
    found: set[ir.Graph] = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.graph in found or not may_skip_its_bodies(node):
            continue
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                body = attr.as_graph()
                found.add(body)
                found.update(_nested(body))
    return found


def _nested(graph: ir.Graph) -> set[ir.Graph]:
    """The subgraphs of the nodes in `graph`, at any depth."""
    found: set[ir.Graph] = set()
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                found.add(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                found.update(attr.as_graphs())
    return found


def _constant_at_least(value: ir.Value | None, low: int) -> bool:
    # An absent trip count or condition puts no bound on the loop: it runs.
    if value is None:
        return True
    if value.const_value is None or value.is_graph_input():
        return False
    array = value.const_value.numpy()
    return array.size == 1 and int(array.reshape(-1)[0]) >= low
