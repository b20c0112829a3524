"""Apply fusion passes to a fixed point, counting each rule's rewrites and recording refusals."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence

import onnx_ir as ir
import onnx_ir.passes.common
from onnxscript.rewriter.pattern import MatchingTracer, MatchStatus, RewriteRule, RewriteRuleSet

from optimizer.fusion_report import FusionReport, Refusal, RuleStats
from optimizer.passes.base import FusionPass
from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS, OpsPresent
from optimizer.passes.notes import pass_notes
from optimizer.plugins.base import DOMAIN as PLUGIN_DOMAIN

__all__ = ["MAX_ITERATIONS", "ir_op_histogram", "run_passes"]

# Each rule removes nodes, so a fixed point comes quickly; this only guards against two rules
# that undo each other.
MAX_ITERATIONS = 8
_MAX_REFUSALS_PER_RULE = 20


def ir_op_histogram(model: ir.Model) -> dict[str, int]:
    """Node count per op ("Conv", or "domain.Op" outside the default domain), subgraphs included."""
    counts: Counter[str] = Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        counts[node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"] += 1
    return dict(sorted(counts.items()))


_KNOWN_DOMAINS = (*ONNX_DOMAINS, MS_DOMAIN, PLUGIN_DOMAIN)
_QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "ConvInteger", "MatMulInteger",
})


def _left_alone_notes(ops: dict[str, int]) -> tuple[str, ...]:
    """Say what the passes do not understand and therefore never touch."""
    notes = []
    foreign: Counter[str] = Counter()
    for key, count in ops.items():
        domain, _, op = key.rpartition(".")
        if domain not in _KNOWN_DOMAINS:
            foreign[domain] += count
    for domain, count in sorted(foreign.items()):
        notes.append(f"left {count} node(s) of domain '{domain}' alone: no pass knows its ops")
    quantized = sum(count for key, count in ops.items() if key in _QUANTIZED_OPS)
    if quantized:
        notes.append(
            f"the model is quantized ({quantized} quantization node(s)); patterns that include "
            "quantized tensors are not fused, since the rules match float ops only"
        )
    return tuple(notes)


def _rule_name(fusion_pass: FusionPass, rule: RewriteRule) -> str:
    return rule.name or f"{fusion_pass.name}.{type(rule).__name__}"


def run_passes(
    model: ir.Model,
    passes: Sequence[FusionPass],
    *,
    backend: str,
    excluded_rules: Collection[str] = (),
) -> FusionReport:
    """Rewrite `model` in place with `passes` (in order, repeated until nothing changes).

    Passes that do not support `backend` are skipped and listed in the report with the reason.
    Rules named in `excluded_rules` (a rule's name, or a clean-up pass's name) never run: pass
    bisection and the validation fallback use this to drop the rule that broke equivalence.
    """
    excluded = frozenset(excluded_rules)
    started = time.perf_counter()
    ops_before = ir_op_histogram(model)
    runnable = [p for p in passes if p.supports(backend)]
    skipped = {
        p.name: f"no {backend} lowering (the backend handles this pattern itself or has no fused form)"
        for p in passes
        if not p.supports(backend)
    }
    applied: defaultdict[tuple[str, str], int] = defaultdict(int)
    iterations = 0
    while True:
        iterations += 1
        changed = sum(_apply_once(model, fusion_pass, backend, applied, excluded)
                      for fusion_pass in runnable)
        if changed:
            # Rewrites leave the weights they replaced behind: without this a fused ResNet-50
            # carries both copies (102 MB -> 196 MB), and the dry run's clean-up would count
            # removing them as work left, costing a whole extra round.
            ir.passes.common.RemoveUnusedNodesPass()(model)
        # The dry run stands in for the round that would find nothing left to rewrite, and
        # collects each rule's refusals on the way: one matching round fewer per model.
        pending, refusals = _dry_run(model, runnable, backend, applied, excluded)
        if pending == 0 or iterations == MAX_ITERATIONS:
            break
    rules = tuple(
        RuleStats(
            pass_name=p.name,
            rule=name,
            applied=applied[(p.name, name)],
            refusals=tuple(refusals.get(name, ())),
        )
        for p in runnable
        for name in ([_rule_name(p, r) for r in p.rules_for(backend)] or [p.name])
        if name not in excluded
    )
    ops_after = ir_op_histogram(model)
    return FusionReport(
        backend=backend,
        passes_run=tuple(p.name for p in runnable),
        passes_skipped=skipped,
        nodes_before=sum(ops_before.values()),
        nodes_after=sum(ops_after.values()),
        ops_before=ops_before,
        ops_after=ops_after,
        rules=rules,
        iterations=iterations,
        duration_s=round(time.perf_counter() - started, 4),
        notes=(*_left_alone_notes(ops_before), *pass_notes(model)),
        excluded_rules=tuple(sorted(excluded)),
    )


def _apply_once(
    model: ir.Model,
    fusion_pass: FusionPass,
    backend: str,
    applied: defaultdict[tuple[str, str], int],
    excluded: frozenset[str],
) -> int:
    changed = _apply_graph_function(model, fusion_pass, applied, excluded)
    present = OpsPresent(model)
    for rule in fusion_pass.rules_for(backend):
        if _rule_name(fusion_pass, rule) in excluded:
            continue
        if not present.may_match(rule):
            continue
        # One rule per set so each rule's count is known.
        count = RewriteRuleSet([rule]).apply_to_model(model)
        applied[(fusion_pass.name, _rule_name(fusion_pass, rule))] += count
        changed += count
        if count:
            present = OpsPresent(model)
    return changed


def _apply_graph_function(
    model: ir.Model,
    fusion_pass: FusionPass,
    applied: defaultdict[tuple[str, str], int],
    excluded: frozenset[str],
) -> int:
    if fusion_pass.graph_function is None or fusion_pass.name in excluded:
        return 0
    count = fusion_pass.graph_function(model)
    applied[(fusion_pass.name, fusion_pass.name)] += count
    return count


class _DryRunTracer(MatchingTracer):
    """Counts the matches a rule would rewrite, and keeps those its check refused, with the
    check's reason. With a tracer the rewriter changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.matches = 0
        self.refusals: list[Refusal] = []

    def log(self, rule, container, node, match_result, status) -> None:  # type: ignore[no-untyped-def]
        if status == MatchStatus.SUCCESS:
            self.matches += 1
        elif status == MatchStatus.REPLACEMENT_FAILED:  # logged after the SUCCESS of its match
            self.matches -= 1
        elif status == MatchStatus.CONDITION_FAILED and len(self.refusals) < _MAX_REFUSALS_PER_RULE:
            node_name = node.name or f"{node.op_type} producing {node.outputs[0].name}"
            self.refusals.append(Refusal(node=node_name, reason=str(match_result.reason)))


def _dry_run(
    model: ir.Model,
    passes: Sequence[FusionPass],
    backend: str,
    applied: defaultdict[tuple[str, str], int],
    excluded: frozenset[str],
) -> tuple[int, dict[str, list[Refusal]]]:
    """How many rewrites another round would make, and each rule's refusals. Clean-ups are not
    pattern rules and cannot be traced, so they run for real (and count as pending)."""
    pending = 0
    refusals: dict[str, list[Refusal]] = {}
    present = OpsPresent(model)
    for fusion_pass in passes:
        cleaned = _apply_graph_function(model, fusion_pass, applied, excluded)
        if cleaned:
            present = OpsPresent(model)
        pending += cleaned
        for rule in fusion_pass.rules_for(backend):
            name = _rule_name(fusion_pass, rule)
            if name in excluded or not present.may_match(rule):
                continue
            tracer = _DryRunTracer()
            RewriteRuleSet([rule]).apply_to_model(model, tracer=tracer)
            pending += tracer.matches
            if tracer.refusals:
                refusals[name] = tracer.refusals
    return pending, refusals
