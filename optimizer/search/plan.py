"""A search's plan before any candidate is built: the rules that fire or refuse on the model
(with the reasons), the candidates and those refused, and the precision each node class of
the fused model runs at in each candidate. What a dry run shows.

The precisions per node class are the policies' (the fp16/bf16 keep list, the ops ONNX
Runtime's quantizer rewrites), read from the op types; the conversion also keeps some nodes by
structure (LayerNorm written out in primitive ops), which only the built candidate shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from optimizer.fusion_report import FusionReport
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision.keep_list import DEFAULT_KEEP
from optimizer.quantization.quantize import DYNAMIC_OP_TYPES, static_op_types
from optimizer.registries.precisions import PRECISIONS
from optimizer.registries.quantization import QuantizationMode
from optimizer.search.candidates import Candidate, SearchSpace, plan_search
from optimizer.search.model_space import spaces_for_model

__all__ = ["job_plan", "node_class_precisions", "search_plan"]

_REFUSALS_SHOWN = 10  # per rule: the first ones, and how many there were


def search_plan(model: onnx.ModelProto, spaces: Sequence[SearchSpace]) -> dict[str, Any]:
    """The plan of a search of `model` over `spaces` (one per backend, the job's first; the
    rules shown are its backend's), JSON-ready.

    Raises:
        PassError: a pass cannot run on the model.
    """
    narrowed = spaces_for_model(model, spaces)
    plan = plan_search([space for space, _ in narrowed])
    ops_by_backend = {space.backend: _op_counts(model, space, report, plan.candidates)
                      for space, report in narrowed}
    default_backend = spaces[0].backend
    return {
        **_fusion_summary(narrowed[0][1]),
        "candidates": [_candidate_entry(c, ops_by_backend[c.backend or default_backend][
            PRECISIONS[c.precision].quantizes]) for c in plan.candidates],
        "refused": [r.to_dict() for r in plan.refused],
    }


def _op_counts(model: onnx.ModelProto, space: SearchSpace, report: FusionReport,
               candidates: Sequence[Candidate]) -> dict[bool, Mapping[str, int]]:
    """The fused model's op counts on `space`'s backend: [False] as fused for float, [True] as
    fused for quantization (without the passes that would hide ops from the quantizer)."""
    counts: dict[bool, Mapping[str, int]] = {False: report.ops_after, True: report.ops_after}
    if any(PRECISIONS[c.precision].quantizes and (c.backend or space.backend) == space.backend
           for c in candidates):
        _, quantized = optimize_model(model, OptimizeOptions(backend=str(space.backend),
                                                             for_quantization=True))
        counts[True] = quantized.ops_after
    return counts


def job_plan(model: onnx.ModelProto, candidate: Candidate, backend: str) -> dict[str, Any]:
    """The plan of a one-configuration job (`candidate`: its precision, passes and
    quantization mode), in the form of `search_plan`'s with one candidate.

    Raises:
        PassError: a pass cannot run on the model.
    """
    passes = candidate.passes if isinstance(candidate.passes, str) else list(candidate.passes)
    _, report = optimize_model(model, OptimizeOptions(
        backend=backend, passes=passes,
        for_quantization=PRECISIONS[candidate.precision].quantizes))
    return {**_fusion_summary(report),
            "candidates": [_candidate_entry(candidate, report.ops_after)], "refused": []}


def _fusion_summary(report: FusionReport) -> dict[str, Any]:
    rules = [{"pass": stats.pass_name, "rule": stats.rule, "applied": stats.applied,
              "refused": len(stats.refusals),
              "refusals": [{"node": r.node, "reason": r.reason}
                           for r in stats.refusals[:_REFUSALS_SHOWN]]}
             for stats in report.rules if stats.applied or stats.refusals]
    return {"rules": rules, "passes_skipped": dict(report.passes_skipped),
            "nodes_before": report.nodes_before, "nodes_after": report.nodes_after}


def _candidate_entry(candidate: Candidate, op_counts: Mapping[str, int]) -> dict[str, Any]:
    return {"name": candidate.name, "recipe": candidate.overrides(),
            "precisions": node_class_precisions(op_counts, candidate)}


def node_class_precisions(op_counts: Mapping[str, int], candidate: Candidate) -> dict[str, str]:
    """The precision each op type of the fused model runs at in `candidate`."""
    precision = PRECISIONS[candidate.precision]
    if precision.quantizes:
        quantized = (frozenset(DYNAMIC_OP_TYPES)
                     if candidate.quantization_mode is QuantizationMode.DYNAMIC
                     else static_op_types())
        return {op: str(candidate.precision) if op in quantized else "float (not quantized)"
                for op in op_counts}
    if precision.converts:
        return {op: f"fp32 (kept: {DEFAULT_KEEP.ops[op]})" if op in DEFAULT_KEEP.ops
                else str(candidate.precision) for op in op_counts}
    return {op: str(candidate.precision) for op in op_counts}
