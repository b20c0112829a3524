"""What fusion rules share to match a subgraph: written-form rules, domains, opsets, node labels.

`FormsRule` lets a rule list its pattern in several written forms (operand orders, bracketings)
and have each form's check decide; the rest names things the rules and their refusal reasons
read off a model or node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir
from onnxscript.rewriter import MatchContext
from onnxscript.rewriter.pattern import (
    MatchingTracer,
    MatchResult,
    Pattern,
    PatternMatcher,
    RewriteRule,
    RewriteRuleClassBase,
)

__all__ = ["MS_DOMAIN", "ONNX_DOMAINS", "FormsMatcher", "FormsRule", "default_opset", "node_label"]

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
