"""Pass bisection names a deliberately wrong rule registered next to correct ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import RewriteRuleClassBase

from optimizer.model.shapes import fix_input_shapes
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.testing.models import small_cnn
from optimizer.validation.bisect import bisect_rules, equivalence_check
from optimizer.validation.tolerances import default_tolerances


class ReluToLeakyRelu(RewriteRuleClassBase):
    """A WRONG rewrite, planted to be found: Relu(x) is not LeakyRelu(x, 0.1) for x < 0."""

    def pattern(self, op: Any, x: ir.Value) -> ir.Value:
        return op.Relu(x)

    def rewrite(self, op: Any, x: ir.Value) -> ir.Value:
        return op.LeakyRelu(x, alpha=0.1)


PLANTED = FusionPass(
    name="planted_wrong_rule", summary="test only", stage="other",
    rules={"onnxruntime": [ReluToLeakyRelu.rule()]},
)


# First, so the Relus are still there to rewrite.
WITH_A_WRONG_RULE = OptimizeOptions(catalog=(PLANTED, *DEFAULT_PASSES))


def _model_and_check() -> tuple[Any, Any]:
    model = fix_input_shapes(small_cnn(seed=4), {"input": [2, 3, 32, 32]})
    rng = np.random.default_rng(0)
    feeds = [{"input": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)} for _ in range(2)]
    return model, equivalence_check(model, feeds, default_tolerances("fp32"))


def test_bisection_names_the_planted_wrong_rule() -> None:
    model, is_equivalent = _model_and_check()
    fused, report = optimize_model(model, WITH_A_WRONG_RULE)
    assert "ReluToLeakyRelu" in report.applied_rules() and len(report.applied_rules()) >= 3
    assert not is_equivalent(fused)

    result = bisect_rules(model, WITH_A_WRONG_RULE, is_equivalent)

    assert result.culprits == (("ReluToLeakyRelu",),)
    assert result.contexts == ((),)  # it fails on its own
    assert result.passes_with_culprits_excluded
    fixed, _ = optimize_model(model, replace(WITH_A_WRONG_RULE,
                                             excluded_rules=result.culprit_rules))
    assert is_equivalent(fixed)


def shift_classifier_bias(model: ir.Model) -> int:
    """A WRONG clean-up, planted to be found: adds 1 to the classifier's bias, once."""
    bias = model.graph.initializers["fc.b"]
    if model.metadata_props.get("planted") or bias.const_value is None:
        return 0
    bias.const_value = ir.tensor(bias.const_value.numpy() + 1.0, name="fc.b")
    model.metadata_props["planted"] = "1"
    return 1


WRONG_CLEAN_UP = FusionPass(name="planted_wrong_cleanup", summary="test only", stage="cleanup",
                            graph_function=shift_classifier_bias)


def test_a_wrong_clean_up_is_judged_on_its_own_and_blamed() -> None:
    model, is_equivalent = _model_and_check()

    result = bisect_rules(model, OptimizeOptions(catalog=(WRONG_CLEAN_UP, *DEFAULT_PASSES)),
                          is_equivalent)

    assert result.culprits == (("planted_wrong_cleanup",),)
    assert result.passes_with_culprits_excluded
    # Checked with only the clean-ups that changed the graph on (here the planted one; the real
    # clean-up changes nothing on this model), every rule off.
    assert result.steps[1].enabled_rules == ("planted_wrong_cleanup",)
    assert not result.steps[1].passed


def test_clean_ups_stay_on_while_the_rules_are_halved() -> None:
    """Rules check shapes the clean-up infers (on the BERT encoder almost none fires without
    it, even where it changes nothing), so every candidate keeps it on."""
    model, is_equivalent = _model_and_check()

    result = bisect_rules(model, WITH_A_WRONG_RULE, is_equivalent)

    assert result.culprits == (("ReluToLeakyRelu",),)
    assert len(result.steps) > 2
    assert all(step.enabled_rules[0] == "cleanup" for step in result.steps)


def test_bisection_finds_nothing_when_every_rule_is_correct() -> None:
    model, is_equivalent = _model_and_check()
    result = bisect_rules(model, OptimizeOptions(), is_equivalent)
    assert result.culprits == () and result.passes_with_culprits_excluded
    assert len(result.steps) == 1  # one check of the full rule set, no search


def test_excluded_rules_never_run_and_are_reported() -> None:
    model, _ = _model_and_check()
    _, report = optimize_model(model, OptimizeOptions(excluded_rules=("FoldBatchNormIntoConv",)))
    assert report.ops_after.get("BatchNormalization") == 2
    assert report.excluded_rules == ("FoldBatchNormIntoConv",)
    assert "FoldBatchNormIntoConv" not in report.applied_rules()
