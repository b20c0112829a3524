"""What fusion rules share to match a subgraph: written-form rules, domains, opsets, node labels.

`FormsRule` lets a rule list its pattern in several written forms (operand orders, bracketings)
and have each form's check decide; `OpsPresent` says which rules cannot match a model at all;
the rest names things the rules and their refusal reasons read off a model or node.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import MatchContext
from onnxscript.rewriter._matcher import SimplePatternMatcher
from onnxscript.rewriter._pattern_ir import NodeOutputPattern, NodePattern
from onnxscript.rewriter.pattern import (
    MatchingTracer,
    MatchResult,
    Pattern,
    PatternMatcher,
    RewriteRule,
    RewriteRuleClassBase,
)

__all__ = ["MS_DOMAIN", "ONNX_DOMAINS", "FormsMatcher", "FormsRule", "OpsPresent", "default_opset",
           "node_label"]

MS_DOMAIN = "com.microsoft"  # onnxruntime's contrib ops (FusedConv, Gelu, SkipLayerNormalization)
ONNX_DOMAINS = ("", "ai.onnx")  # the default domain, under either of its names


def default_opset(model: ir.Model, default: int = 0) -> int:
    """The model's version of the default ONNX domain (`default` if it imports none)."""
    imports = model.opset_imports
    return imports.get("", imports.get("ai.onnx", default))


def node_label(node: ir.Node) -> str:
    """How a report names a node: "Mul 'name'", or "Mul producing 'y'" for an unnamed one."""
    if node.name:
        return f"{node.op_type} '{node.name}'"
    return f"{node.op_type} producing '{node.outputs[0].name}'"


class FormsMatcher(PatternMatcher):
    """Matches the first written form whose structure fits and whose check passes.

    When forms fit but every check refuses, returns the first fitting form's match, so the
    rule's check runs on it again and its reason is what the report shows.
    """

    def __init__(self, graph_pattern: Any, forms: Sequence[Pattern],
                 condition: Callable[..., MatchResult]) -> None:
        super().__init__(graph_pattern)
        self.forms = forms
        self._condition = condition

    def match(self, model: ir.Model, graph_or_function: ir.Graph | ir.Function, node: ir.Node, *,
              verbose: int = 0, remove_nodes: bool = True,
              tracer: MatchingTracer | None = None) -> MatchResult:
        refused: MatchResult | None = None
        for form in self.forms:
            result = form.match(model, graph_or_function, node, verbose=verbose,
                                check_nodes_are_removable=remove_nodes)
            if not result:
                continue
            context = MatchContext(model, graph_or_function, node, result)
            if self._condition(context, **result.bindings):
                return result
            if refused is None:
                refused = result
        if refused is not None:
            return refused
        return MatchResult().fail(f"no written form matches at {node_label(node)}")


class FormsRule(RewriteRuleClassBase):
    """A rule whose pattern is written in several forms (operand orders, bracketings).

    Subclasses give `forms()`: pattern functions with the same parameters, tried in order. The
    onnxscript pattern language cannot put alternatives at a pattern's root, and a pattern
    variable matches constants and computed values alike, so a commuted Mul of two variables is
    ambiguous; trying whole forms, each with its check, settles both.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name, remove_nodes=False)

    def forms(self) -> Sequence[Callable[..., Any]]:
        raise NotImplementedError

    def pattern(self, op: Any, *args: Any) -> Any:
        return self.forms()[0](op, *args)

    @classmethod
    def rule(cls, *args: Any, **kwargs: Any) -> RewriteRule:
        instance = cls(*args, **kwargs)
        forms = instance.forms()
        compiled = [Pattern(form, name=f"{instance.name} form {i}") for i, form in enumerate(forms)]

        def matcher(graph_pattern: Any) -> PatternMatcher:
            return FormsMatcher(graph_pattern, compiled, instance.check)

        return RewriteRule(forms[0], instance.rewrite, instance.check, matcher=matcher,
                           name=instance.name, remove_nodes=False)


_Ops = frozenset[tuple[str, str]]


class OpsPresent:
    """The (domain, op) of the model's nodes, read on the first question: make a new one after
    a rewrite changed the graph (reading them for every rule cost a ResNet-50 70 ms)."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self._ops: set[tuple[str, str]] | None = None

    def may_match(self, rule: RewriteRule) -> bool:
        """False when, for each written form of the rule's pattern, the model lacks a node of
        an op the form cannot match without, so the rule cannot match: trying it on every node
        anyway was a third of the time a ResNet-50's passes took (the rules for transformers'
        ops, on a graph of convolutions). A form needs the ops of the nodes its outputs are
        computed by and, through their inputs, of every node it names outside an OrValue's
        alternatives (a LayerNorm's ReduceMean as well as the Add at its root)."""
        forms = _required_ops(rule)
        if forms is None:
            return True
        if self._ops is None:
            self._ops = {(_domain(node.domain), node.op_type)
                         for node in ir.traversal.RecursiveGraphIterator(self._model.graph)}
            for function in self._model.functions.values():
                self._ops.update((_domain(node.domain), node.op_type) for node in function)
        return any(required <= self._ops for required in forms)


# Keyed by the rule itself (not its id, which a later rule may reuse), and let go with it.
_REQUIRED_OPS: weakref.WeakKeyDictionary[RewriteRule, tuple[_Ops, ...] | None] = (
    weakref.WeakKeyDictionary())


def _required_ops(rule: RewriteRule) -> tuple[_Ops, ...] | None:
    """For each written form of the rule's pattern, the (domain, op) of the nodes it needs;
    None where the rule does not say (a matcher of its own, an output that is not a node's):
    then it is tried everywhere."""
    if rule not in _REQUIRED_OPS:
        _REQUIRED_OPS[rule] = _read_required_ops(rule)
    return _REQUIRED_OPS[rule]


def _read_required_ops(rule: RewriteRule) -> tuple[_Ops, ...] | None:
    # onnxscript's internals: the pattern a rule was built from, and its matcher. A FormsRule
    # matches any of its forms; any other matcher might match anything.
    matcher = getattr(rule, "_matcher", None)
    if isinstance(matcher, FormsMatcher):
        patterns = [getattr(form, "_target_pattern", None) for form in matcher.forms]
    elif type(matcher) is SimplePatternMatcher:
        patterns = [getattr(rule, "_target_pattern", None)]
    else:
        return None
    forms: set[_Ops] = set()
    for pattern in patterns:
        roots: list[NodePattern] = []
        for output in getattr(pattern, "outputs", None) or [None]:
            producer = output.producer() if isinstance(output, NodeOutputPattern) else None
            if producer is None or _op(producer) is None:
                return None
            roots.append(producer)
        forms.add(_ops_needed(roots))
    return tuple(forms)


def _ops_needed(roots: list[NodePattern]) -> _Ops:
    """The ops of `roots` and of the nodes computing their inputs, transitively. An input that
    is an OrValue (either of its alternatives may match), a variable or a constant adds none;
    a node whose op is itself a pattern adds none, but its inputs' nodes do."""
    ops, seen, pending = set(), set(), list(roots)
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        op = _op(node)
        if op is not None:
            ops.add(op)
        pending.extend(value.producer() for value in node.inputs
                       if isinstance(value, NodeOutputPattern))
    return frozenset(ops)


def _op(node: NodePattern) -> tuple[str, str] | None:
    identifier = node.op_identifier()
    if identifier is None or not all(isinstance(part, str) for part in identifier[:2]):
        return None
    return _domain(identifier[0]), identifier[1]


def _domain(domain: str) -> str:
    return "" if domain in ONNX_DOMAINS else domain
