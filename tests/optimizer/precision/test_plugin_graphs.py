"""Precision conversion, emulated evaluation and search on graphs fused for TensorRT.

fuseforge plugin nodes convert as their schemas (float, float16, bfloat16) and TensorRT
registrations allow; their kernels compute in float32 inside and store their outputs in the
node's type, which is what the emulation reproduces before the plugins are decomposed into standard
ops for ONNX Runtime.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import onnx
import pytest

import optimizer.precision.plan as plan_module
from optimizer.errors import PluginNotFoundError
from optimizer.plugins import DOMAIN, PLUGINS, Plugin, plugin_for_op
from optimizer.precision import (
    LOW_DTYPES,
    AccuracyBudget,
    convert_precision,
    emulate_precision,
    evaluate_precision,
    run_outputs,
    search_precision,
)
from optimizer.precision.plan import plugin_refusal
from optimizer.registries.precisions import Precision
from optimizer.validation.intermediates import intermediate_values
from tests.optimizer.validation.tensorrt_bert import (
    bert_feeds,
    plugin_counts,
    small_bert,
    tensorrt_fused,
)

LOW = {"fp16": (onnx.TensorProto.FLOAT16, np.float16),
       "bf16": (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16)}
PRECISIONS: tuple[Precision, ...] = ("fp16", "bf16")


def fused_bert(seed: int) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    model = small_bert(seed)
    fused, _ = tensorrt_fused(model)
    assert sum(plugin_counts(fused).values()) == 9
    return model, fused


def plugin_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.domain == DOMAIN]


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = inferred.graph
    return {v.name: v.type.tensor_type.elem_type
            for v in (*graph.value_info, *graph.input, *graph.output)}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_plugin_nodes_convert_to_the_low_type_and_pass_the_checker(precision: Precision) -> None:
    _, fused = fused_bert(seed=0)

    converted, report = convert_precision(fused, precision)

    onnx.checker.check_model(converted, full_check=True)
    plugins = plugin_nodes(converted)
    assert {n.name for n in plugins} <= set(report.converted_nodes)
    assert not [k for k in report.kept if k.op_type.startswith(f"{DOMAIN}.")]
    types = value_types(converted)
    low, _ = LOW[precision]
    for node in plugins:
        assert {types[name] for name in (*node.input, *node.output) if name} == {low}, node.name


@pytest.mark.parametrize("precision", PRECISIONS)
def test_emulation_rounds_each_plugin_output_to_the_low_type(precision: Precision) -> None:
    _, fused = fused_bert(seed=1)
    converted, _ = convert_precision(fused, precision)
    fused_names = {name for node in fused.graph.node for name in node.output}
    # (The last SkipLayerNorm writes the graph output, which keeps its name behind a Cast.)
    outputs = [node.output[0] for node in plugin_nodes(converted)
               if node.output[0] in fused_names]
    assert len(outputs) == 8
    feeds = bert_feeds(seed=1, count=1)

    (emulated,) = intermediate_values(emulate_precision(converted), outputs, feeds)
    (exact,) = intermediate_values(fused, outputs, feeds)

    _, numpy_low = LOW[precision]
    for name in outputs:
        value = np.asarray(emulated[name])
        assert value.dtype == np.float32  # computed in float32, as the plugin kernels do
        np.testing.assert_array_equal(value, value.astype(numpy_low).astype(np.float32))
        assert not np.array_equal(value, exact[name])  # the rounding is really there


@pytest.mark.parametrize("precision", PRECISIONS)
def test_evaluation_of_a_converted_plugin_graph_is_within_default_tolerances(
        precision: Precision) -> None:
    model, fused = fused_bert(seed=2)
    converted, _ = convert_precision(fused, precision)
    feeds = bert_feeds(seed=2)

    against_original = evaluate_precision(model, converted, feeds, precision=precision)
    against_fused = evaluate_precision(fused, converted, feeds, precision=precision)

    for evaluation in (against_original, against_fused):
        assert evaluation.method == "emulated" and evaluation.passed, evaluation.to_dict()
        (output,) = evaluation.validation.outputs
        assert 0 < output.max_abs_err < 0.1
    np.testing.assert_allclose(run_outputs(fused, feeds)[0]["last_hidden_state"],
                               run_outputs(model, feeds)[0]["last_hidden_state"], atol=1e-4)


def test_a_plugin_node_kept_in_float32_gets_casts_and_still_evaluates() -> None:
    model, fused = fused_bert(seed=3)
    attention = next(n.name for n in plugin_nodes(fused) if n.op_type == "MultiHeadAttention")

    converted, report = convert_precision(fused, "fp16", extra_fp32_nodes=[attention])

    onnx.checker.check_model(converted, full_check=True)
    assert (attention, f"{DOMAIN}.MultiHeadAttention", "named in extra_fp32_nodes") in [
        (k.name, k.op_type, k.reason) for k in report.kept]
    node = next(n for n in converted.graph.node if n.name == attention)
    types = value_types(converted)
    assert {types[name] for name in (*node.input, *node.output)} == {onnx.TensorProto.FLOAT}
    assert evaluate_precision(model, converted, bert_feeds(seed=3), precision="fp16").passed


# A plugin whose schema or TensorRT registration lacks the type stays float32, saying why.

def test_the_shipped_plugins_admit_float16_and_bfloat16() -> None:
    for plugin in PLUGINS.values():
        for precision in PRECISIONS:
            assert plugin_refusal(plugin, LOW_DTYPES[precision]) is None, (plugin.name, precision)


def _without_bf16(plugin: Plugin) -> Plugin:
    return replace(plugin, type_constraint=("tensor(float)", "tensor(float16)"))


def test_a_plugin_without_the_type_is_refused_naming_the_types_it_has() -> None:
    narrow = _without_bf16(PLUGINS["bias_gelu"])
    assert plugin_refusal(narrow, LOW_DTYPES["fp16"]) is None
    reason = plugin_refusal(narrow, LOW_DTYPES["bf16"])
    assert reason is not None
    assert "bias_gelu" in reason and "bfloat16" in reason and "float, float16" in reason


def test_plugin_nodes_without_the_type_stay_float32_behind_casts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def narrow_gelu(domain: str, op_type: str) -> Plugin:
        plugin = plugin_for_op(domain, op_type)
        return _without_bf16(plugin) if plugin.name == "bias_gelu" else plugin

    # Stands for a plugin registered for float and float16 only (none ships like that).
    monkeypatch.setattr(plan_module, "plugin_for_op", narrow_gelu)
    model, fused = fused_bert(seed=4)

    converted, report = convert_precision(fused, "bf16")

    onnx.checker.check_model(converted, full_check=True)
    kept = {k.name: k for k in report.kept if k.op_type == f"{DOMAIN}.BiasGelu"}
    gelus = [n for n in plugin_nodes(converted) if n.op_type == "BiasGelu"]
    assert set(kept) == {n.name for n in gelus} and len(gelus) == 2
    assert all("bfloat16" in k.reason for k in kept.values())
    types = value_types(converted)
    for node in gelus:
        assert {types[name] for name in (*node.input, *node.output)} == {onnx.TensorProto.FLOAT}
    others = {n.name for n in plugin_nodes(converted) if n.op_type != "BiasGelu"}
    assert others <= set(report.converted_nodes)
    assert evaluate_precision(model, converted, bert_feeds(seed=4), precision="bf16").passed


def test_an_unknown_fuseforge_op_stays_float32_with_the_reason() -> None:
    _, fused = fused_bert(seed=5)
    with pytest.raises(PluginNotFoundError):
        plugin_for_op(DOMAIN, "QuickGelu")
    renamed = onnx.ModelProto()
    renamed.CopyFrom(fused)
    gelu = next(n for n in renamed.graph.node if n.op_type == "BiasGelu")
    gelu.op_type = "QuickGelu"

    _, report = convert_precision(renamed, "fp16")

    (kept,) = [k for k in report.kept if k.name == gelu.name]
    assert kept.op_type == f"{DOMAIN}.QuickGelu" and "QuickGelu" in kept.reason


# Precision search measures sensitivities tensor by tensor, through the decomposed plugins.

def test_search_on_a_plugin_graph_meets_a_budget_the_default_conversion_misses() -> None:
    model, fused = fused_bert(seed=6)
    feeds = bert_feeds(seed=6, count=2)
    default, _ = convert_precision(fused, "bf16")
    default_cosine = evaluate_precision(fused, default, feeds, precision="bf16")
    (output,) = default_cosine.validation.outputs
    # Halfway between the default conversion's cosine and 1: some nodes must go back to fp32.
    budget = AccuracyBudget(min_cosine=1 - (1 - output.cosine_similarity) / 2)

    result = search_precision(fused, feeds, precision="bf16", budget=budget,
                              max_evaluations=24)

    assert result.sensitivity_passes >= 1 and result.kept_fp32_nodes
    assert result.within_budget, result.to_dict()
    assert result.accuracy.cosine >= budget.min_cosine
    assert result.converted > 0
    kept = {n.name for n in result.kept_fp32_nodes}
    assert kept <= {n.name for n in result.model.graph.node}
    onnx.checker.check_model(result.model, full_check=True)
    assert evaluate_precision(model, result.model, feeds, precision="bf16").passed
