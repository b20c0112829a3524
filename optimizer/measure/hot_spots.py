"""Why the engine is not faster: its per-node profile beside the original's, mapped back to the
original's nodes, with the hot spots named.

Inputs are two profiles (optimizer/measure/node_profile.py), each session node's original nodes
(optimizer/measure/provenance.py), what the fusion report and the precision report already say
about single nodes, and the machine's memory bandwidth. A node is memory-bound when the bytes it
moves, at that bandwidth, take at least `MEMORY_BOUND_FRACTION` of its time: a faster kernel
cannot help it much, moving fewer bytes (fusion, a narrower type) can.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from optimizer.measure.node_profile import NodeProfile, NodeTime
from optimizer.measure.provenance import Provenance

__all__ = ["MEMORY_BOUND_FRACTION", "ProfileInputs", "profile_report"]

MEMORY_BOUND_FRACTION = 0.5
TOP_NODES = 20


@dataclass(frozen=True)
class ProfileInputs:
    original: NodeProfile
    engine: NodeProfile
    original_op_types: Mapping[str, str]  # original node id -> op type
    original_provenance: Provenance  # the original's session nodes -> original nodes
    engine_provenance: Provenance  # the engine's session nodes -> original nodes
    refusals: Mapping[str, str]  # original node -> why a fusion rule refused it
    float_reasons: Mapping[str, str]  # original node -> why it stayed in float (int8 jobs)
    bandwidth_gb_s: float | None


def profile_report(inputs: ProfileInputs, *, top: int = TOP_NODES) -> dict[str, Any]:
    """The report (plain JSON): both profiles' summaries, time by op type before and after, the
    engine's top nodes with their origin, the original nodes left unfused or in float, the
    share of time in memory-bound nodes, how completely the engine maps back, and a one-line
    `hot_spot`."""
    engine, original = inputs.engine, inputs.original
    engine_by_original = _spread(engine.nodes, inputs.engine_provenance)
    original_by_original = _spread(original.nodes, inputs.original_provenance)
    top_nodes = [_node_row(node, engine, inputs) for node in engine.top(top)]
    return {
        "original": _summary(original),
        "engine": _summary(engine),
        "by_op_type": _by_op_type(original, engine),
        "top_nodes": top_nodes,
        "unfused": _unfused(inputs, original_by_original, engine_by_original, top),
        "in_float": _in_float(inputs, original_by_original, engine_by_original, top),
        "memory_bound": _memory_bound(engine, inputs.bandwidth_gb_s),
        "mapping": _mapping(inputs),
        "hot_spot": _hot_spot(top_nodes, engine),
    }


def _summary(profile: NodeProfile) -> dict[str, Any]:
    return {"latency_ms": round(profile.latency_ms, 4),
            "profiled_run_ms": round(profile.profiled_run_ms, 4),
            "node_sum_ms": round(profile.node_sum_ms, 4),
            "coverage": round(profile.coverage, 4),
            "outside_nodes_ms": round(max(0.0, profile.latency_ms - profile.node_sum_ms), 4),
            "nodes": len(profile.nodes), "runs": profile.runs}


def _by_op_type(original: NodeProfile, engine: NodeProfile) -> list[dict[str, Any]]:
    before, after = original.by_op_type(), engine.by_op_type()
    ops = sorted(set(before) | set(after), key=lambda op: -max(before.get(op, 0.0),
                                                               after.get(op, 0.0)))
    return [{"op_type": op, "original_ms": round(before.get(op, 0.0), 4),
             "engine_ms": round(after.get(op, 0.0), 4)} for op in ops]


def _spread(nodes: Iterable[NodeTime], provenance: Provenance) -> dict[str, float]:
    """Each original node's share of the session's time: a session node's time split evenly
    over the original nodes it came from."""
    shares: dict[str, float] = defaultdict(float)
    for node in nodes:
        origins = provenance.get(node.node, ())
        for origin in origins:
            shares[origin] += node.time_ms / len(origins)
    return shares


def _achieved_gb_s(node: NodeTime) -> float | None:
    return node.bytes_moved / (node.time_ms * 1e6) if node.time_ms > 0 else None


def _is_memory_bound(node: NodeTime, bandwidth_gb_s: float | None) -> bool | None:
    achieved = _achieved_gb_s(node)
    if achieved is None or not bandwidth_gb_s or not node.bytes_moved:
        return None
    return achieved >= MEMORY_BOUND_FRACTION * bandwidth_gb_s


def _node_row(node: NodeTime, engine: NodeProfile, inputs: ProfileInputs) -> dict[str, Any]:
    origins = inputs.engine_provenance.get(node.node, ())
    achieved = _achieved_gb_s(node)
    return {"node": node.node, "op_type": node.op_type, "time_ms": round(node.time_ms, 4),
            "share": round(node.time_ms / engine.node_sum_ms, 4) if engine.node_sum_ms else 0.0,
            "calls": node.calls, "bytes_moved": node.bytes_moved,
            "achieved_gb_s": None if achieved is None else round(achieved, 2),
            "memory_bound": _is_memory_bound(node, inputs.bandwidth_gb_s),
            "from": list(origins),
            "from_op_types": sorted({inputs.original_op_types.get(o, "?") for o in origins})}


def _unfused(inputs: ProfileInputs, before: Mapping[str, float], after: Mapping[str, float],
             top: int) -> list[dict[str, Any]]:
    """Original nodes that reached the engine alone (an engine node made of that node only),
    slowest in the engine first, with the refusal the fusion report holds for them."""
    alone: set[str] = set()
    shared: set[str] = set()
    for origins in inputs.engine_provenance.values():
        (alone if len(origins) == 1 else shared).update(origins)
    rows: list[dict[str, Any]] = [{"node": node, "op_type": inputs.original_op_types.get(node, "?"),
             "original_ms": round(before.get(node, 0.0), 4),
             "engine_ms": round(after.get(node, 0.0), 4),
             "refusal": inputs.refusals.get(node)}
            for node in alone - shared]
    rows.sort(key=lambda row: (row["refusal"] is None, -row["engine_ms"]))
    return rows[:top]


def _in_float(inputs: ProfileInputs, before: Mapping[str, float], after: Mapping[str, float],
              top: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"node": node, "op_type": inputs.original_op_types.get(node, "?"),
             "original_ms": round(before.get(node, 0.0), 4),
             "engine_ms": round(after.get(node, 0.0), 4), "reason": reason}
            for node, reason in inputs.float_reasons.items()]
    rows.sort(key=lambda row: -row["engine_ms"])
    return rows[:top]


def _memory_bound(engine: NodeProfile, bandwidth_gb_s: float | None) -> dict[str, Any]:
    bound = [n for n in engine.nodes if _is_memory_bound(n, bandwidth_gb_s)]
    time_ms = sum(n.time_ms for n in bound)
    return {"bandwidth_gb_s": None if bandwidth_gb_s is None else round(bandwidth_gb_s, 2),
            "threshold": MEMORY_BOUND_FRACTION,
            "nodes": len(bound), "time_ms": round(time_ms, 4),
            "share": (round(time_ms / engine.node_sum_ms, 4)
                      if bandwidth_gb_s and engine.node_sum_ms else None)}


def _mapping(inputs: ProfileInputs) -> dict[str, Any]:
    profiled = [n.node for n in inputs.engine.nodes]
    unmapped = [n for n in profiled if not inputs.engine_provenance.get(n)]
    reached = {o for n in profiled for o in inputs.engine_provenance.get(n, ())}
    return {"engine_nodes": len(profiled), "engine_nodes_mapped": len(profiled) - len(unmapped),
            "unmapped": unmapped[:TOP_NODES], "original_nodes": len(inputs.original_op_types),
            "original_nodes_reached": len(reached)}


def _hot_spot(top_nodes: list[dict[str, Any]], engine: NodeProfile) -> str | None:
    if not top_nodes:
        return None
    first = top_nodes[0]
    origins = first["from"]
    origin = (f"from {len(origins)} original node(s): {', '.join(origins[:4])}"
              f"{', ...' if len(origins) > 4 else ''}" if origins else "mapped to no original node")
    bound = " (memory-bound)" if first["memory_bound"] else ""
    return (f"{first['node']} ({first['op_type']}{bound}) takes {first['time_ms']:.3g} ms, "
            f"{first['share']:.0%} of the engine's node time ({engine.latency_ms:.3g} ms a run), "
            f"{origin}")
