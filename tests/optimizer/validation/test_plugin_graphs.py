"""Bisection and divergence localisation on graphs fused for TensorRT.

The "tensorrt" passes write fuseforge plugin nodes, which ONNX Runtime runs only once they are
decomposed into the standard ops they stand for. Both tools must judge such graphs on the CPU and
name the plugin node (and the plugin rule) at fault, not a decomposed op.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_to_plugins import PluginSkipLayerNorm
from optimizer.plugins import DOMAIN
from optimizer.testing.real_models import BertForm
from optimizer.validation.bisect import bisect_rules, equivalence_check
from optimizer.validation.localize import localize_divergence
from optimizer.validation.tolerances import default_tolerances
from tests.optimizer.validation.tensorrt_bert import (
    bert_feeds,
    plugin_counts,
    small_bert,
    tensorrt_fused,
)

FP32 = default_tolerances("fp32")
EVERY_PLUGIN = {"SkipLayerNorm": 5, "BiasGelu": 2, "MultiHeadAttention": 2}


@pytest.mark.parametrize("form", ["dynamo", "torchscript", "dynamo_opset20"])
def test_correct_plugin_fusion_is_equivalent_and_localises_nothing(form: BertForm) -> None:
    model = small_bert(seed=1, form=form)
    fused, report = tensorrt_fused(model)
    assert plugin_counts(fused) == EVERY_PLUGIN
    feeds = bert_feeds(seed=1)

    assert equivalence_check(model, feeds, FP32)(fused)
    assert localize_divergence(model, fused, feeds, FP32, fusion_report=report) is None


# A wrong plugin node (an attribute changed after a correct fusion) is named, with its rule.

def _with_attribute(model: onnx.ModelProto, op_type: str, index: int, name: str,
                    value: Any) -> tuple[onnx.ModelProto, onnx.NodeProto]:
    candidate = onnx.ModelProto()
    candidate.CopyFrom(model)
    node = [n for n in candidate.graph.node if n.domain == DOMAIN and n.op_type == op_type][index]
    (attribute,) = [a for a in node.attribute if a.name == name]
    attribute.CopyFrom(helper.make_attribute(name, value))
    return candidate, node


@pytest.mark.parametrize(("op_type", "index", "attribute", "value", "rule"), [
    ("MultiHeadAttention", 1, "scale", 1.2 / np.sqrt(16), "PluginMultiHeadAttention"),
    ("SkipLayerNorm", 2, "epsilon", 0.5, "PluginSkipLayerNormBias"),
    ("BiasGelu", 0, "approximate", "tanh", "PluginBiasGeluErf"),
], ids=["attention_scale", "skip_layer_norm_epsilon", "gelu_approximation"])
def test_wrong_plugin_node_is_named_with_its_rule_and_pass(
        op_type: str, index: int, attribute: str, value: Any, rule: str) -> None:
    model = small_bert(seed=2)
    fused, report = tensorrt_fused(model)
    candidate, wrong = _with_attribute(fused, op_type, index, attribute, value)
    # GELU's tanh form differs from erf by < 5e-4: tighter limits than fp32's defaults see it.
    tolerances = FP32 if op_type != "BiasGelu" else FP32.with_overrides({"atol": 1e-6,
                                                                         "rtol": 1e-6})

    divergence = localize_divergence(model, candidate, bert_feeds(seed=2), tolerances,
                                     fusion_report=report)

    assert divergence is not None
    assert (divergence.node, divergence.op_type) == (wrong.name, f"{DOMAIN}.{op_type}")
    assert divergence.tensor.name == wrong.output[0]
    # A SkipLayerNorm plugin replaces a LayerNormalization that FuseLayerNorm wrote first.
    assert rule in divergence.rules and "fuse_to_plugins" in divergence.passes
    assert f"at node {wrong.name!r} ({DOMAIN}.{op_type})" in divergence.describe()
    # Every tensor it reads from the rest of the graph was compared and is within tolerance.
    assert {i.name for i in divergence.inputs} <= set(wrong.input)
    assert all(not i.failures for i in divergence.inputs)


def test_attention_plugin_inputs_are_the_projections() -> None:
    model = small_bert(seed=3)
    fused, report = tensorrt_fused(model)
    candidate, wrong = _with_attribute(fused, "MultiHeadAttention", 0, "scale", 0.5)

    divergence = localize_divergence(model, candidate, bert_feeds(seed=3), FP32,
                                     fusion_report=report)

    assert divergence is not None and divergence.node == wrong.name
    assert {i.name for i in divergence.inputs} == {
        f"/encoder.layer.0.attention.{p}/Add" for p in ("query", "key", "value")}


# Bisection: a wrong plugin rule planted next to the correct ones is the one blamed.

class WrongEpsilonSkipLayerNorm(PluginSkipLayerNorm):
    """A WRONG plugin rewrite, planted to be found: the plugin's epsilon is 0.5, not the
    model's 1e-5."""

    def rewrite(self, op: Any, **bindings: Any) -> Any:
        output = super().rewrite(op, **bindings)
        node = output.producer()
        assert node is not None and node.domain == DOMAIN
        node.attributes["epsilon"] = ir.AttrFloat32("epsilon", 0.5)
        return output


PLANTED = FusionPass(
    name="planted_wrong_plugin_rule", summary="test only", stage="other",
    rules={"tensorrt": [WrongEpsilonSkipLayerNorm.rule("PlantedWrongSkipLayerNorm", bias=True,
                                                       keep_sum=False)]},
)


_AT = [p.name for p in DEFAULT_PASSES].index("fuse_to_plugins")
# Just before the real plugin pass, so the Add + LayerNorm pairs are still there to take.
WITH_A_WRONG_PLUGIN_RULE = (*DEFAULT_PASSES[:_AT], PLANTED, *DEFAULT_PASSES[_AT:])


def test_bisection_on_plugin_graphs_names_the_planted_wrong_plugin_rule() -> None:
    model = small_bert(seed=4)
    options = OptimizeOptions(backend="tensorrt", catalog=WITH_A_WRONG_PLUGIN_RULE)
    is_equivalent = equivalence_check(model, bert_feeds(seed=4, count=2), FP32)
    fused, report = optimize_model(model, options)
    assert "PlantedWrongSkipLayerNorm" in report.applied_rules()
    assert {"PluginMultiHeadAttention", "PluginBiasGeluErf"} <= set(report.applied_rules())
    assert not is_equivalent(fused)

    result = bisect_rules(model, options, is_equivalent)

    assert result.culprits == (("PlantedWrongSkipLayerNorm",),)
    # It fires only on the LayerNormalization FuseLayerNorm writes (correct on its own).
    assert "FuseLayerNorm" in result.contexts[0]
    assert result.passes_with_culprits_excluded
    fixed, _ = optimize_model(model, replace(options, excluded_rules=result.culprit_rules))
    # The real plugin rule takes the pairs the planted one no longer does.
    assert plugin_counts(fixed) == EVERY_PLUGIN
    assert is_equivalent(fixed)


def test_bisection_on_correct_plugin_graphs_blames_nothing() -> None:
    model = small_bert(seed=5)
    is_equivalent = equivalence_check(model, bert_feeds(seed=5, count=2), FP32)

    result = bisect_rules(model, OptimizeOptions(backend="tensorrt"), is_equivalent)

    assert result.culprits == () and result.passes_with_culprits_excluded
    assert len(result.steps) == 1
