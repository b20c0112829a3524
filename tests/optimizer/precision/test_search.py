"""search_precision: it keeps exactly the planted sensitive layers in float32, nothing more when
the default conversion already meets the budget, and reports an unreachable budget plainly."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.precision import (
    AccuracyBudget,
    PrecisionSearchResult,
    convert_precision,
    evaluate_precision,
    search_precision,
)
from optimizer.registries.precisions import Precision
from optimizer.testing import models
from tests.optimizer.precision.models import finish, loud_layer_norm, tensor

# The statistic of a written-out RMS norm whose squares (~1.6e5) overflow float16 and which the
# keep-list does not recognise (the square is Mul(h, Identity(h)), not Mul(h, h) or Pow).
RMS_STATISTIC = {"rms_square", "rms_mean", "rms_eps", "rms_sqrt"}
# A shift by 4096 and back: float16 spaces numbers 4 apart there, bfloat16 32 apart, so the
# layer's N(0, 1) signal is lost unless both nodes compute in float32.
SHIFT = {"shift_up", "shift_down"}
EXPECTED: dict[str, set[str]] = {"fp16": RMS_STATISTIC | SHIFT, "bf16": SHIFT}


def sensitive_mlp(seed: int, hidden: int = 32) -> onnx.ModelProto:
    """x [4, 16] → dense + Relu → dense (activations of std ≈ 400) → RMS norm written out →
    dense → shift up by 4096 and back → dense → y [4, 10] (class scores). Random weights."""
    rng = np.random.default_rng(seed)

    def dense(name: str, x: str, fan_in: int, fan_out: int, std: float) -> list[onnx.NodeProto]:
        inits.extend([tensor(f"{name}.w", rng.normal(0.0, std / np.sqrt(fan_in),
                                                      (fan_in, fan_out))),
                      tensor(f"{name}.b", rng.normal(0.0, 0.1 * std, fan_out))])
        return [helper.make_node("MatMul", [x, f"{name}.w"], [f"{name}_mm"], name=name),
                helper.make_node("Add", [f"{name}_mm", f"{name}.b"], [f"{name}_out"],
                                 name=f"{name}_bias")]

    inits: list[onnx.TensorProto] = [
        tensor("eps", np.array(1e-5)), tensor("offset", np.array(4096.0)),
        numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    nodes = dense("fc1", "x", 16, hidden, 1.0)
    nodes.append(helper.make_node("Relu", ["fc1_out"], ["a"], name="relu"))
    nodes += dense("fc2", "a", hidden, hidden, 400.0)
    nodes += [
        helper.make_node("Identity", ["fc2_out"], ["h_alias"], name="alias"),
        helper.make_node("Mul", ["fc2_out", "h_alias"], ["sq"], name="rms_square"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="rms_mean"),
        helper.make_node("Add", ["ms", "eps"], ["ms_eps"], name="rms_eps"),
        helper.make_node("Sqrt", ["ms_eps"], ["rms"], name="rms_sqrt"),
        helper.make_node("Div", ["fc2_out", "rms"], ["n"], name="rms_div"),
    ]
    nodes += dense("fc3", "n", hidden, hidden, 1.0)
    nodes += [helper.make_node("Add", ["fc3_out", "offset"], ["shifted"], name="shift_up"),
              helper.make_node("Sub", ["shifted", "offset"], ["back"], name="shift_down")]
    nodes += dense("fc4", "back", hidden, 10, 1.0)
    nodes.append(helper.make_node("Identity", ["fc4_out"], ["y"], name="output"))
    return finish(nodes, inits, [("x", TensorProto.FLOAT, [4, 16])],
                  [("y", TensorProto.FLOAT, [4, 10])], opset=18, name="sensitive_mlp")


def feeds(seed: int, name: str = "x", shape: tuple[int, ...] = (4, 16),
          count: int = 3) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(100 + seed)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def kept_names(result: PrecisionSearchResult) -> set[str]:
    return {node.name for node in result.kept_fp32_nodes}


def assert_strict_json(result: PrecisionSearchResult) -> dict[str, object]:
    text = json.dumps(result.to_dict(), allow_nan=False)
    data = json.loads(text)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_search_keeps_exactly_the_sensitive_layers_in_float32(precision: Precision,
                                                              seed: int) -> None:
    model, samples = sensitive_mlp(seed), feeds(seed)
    budget = AccuracyBudget(min_cosine=0.999)
    default, _ = convert_precision(model, precision)
    assert not evaluate_precision(model, default, samples, precision=precision,
                                  tolerances=budget.tolerances()).passed

    result = search_precision(model, samples, precision=precision, budget=budget)

    assert result.within_budget, result.describe()
    assert kept_names(result) == EXPECTED[precision]
    assert result.accuracy.cosine >= 0.999 and not result.failures
    # The returned model is the conversion the result describes, and it meets the budget.
    check = evaluate_precision(model, result.model, samples, precision=precision,
                               tolerances=budget.tolerances())
    assert check.passed
    assert check.validation.outputs[0].cosine_similarity == pytest.approx(result.accuracy.cosine)
    assert result.converted == result.report.converted
    assert set(result.report.converted_nodes).isdisjoint(EXPECTED[precision])
    # Each planted layer is needed: keeping the other alone misses the budget.
    if precision == "fp16":
        for alone in (RMS_STATISTIC, SHIFT):
            partial, _ = convert_precision(model, precision, extra_fp32_nodes=alone)
            assert not evaluate_precision(model, partial, samples, precision=precision,
                                          tolerances=budget.tolerances()).passed
    # Logarithmic, not one evaluation per node.
    assert result.evaluations <= 10 < len(result.report.converted_nodes) + len(SHIFT)
    data = assert_strict_json(result)
    assert data["within_budget"] is True and data["evaluations"] == result.evaluations


def test_overflowing_statistic_is_reported_as_past_the_float16_range() -> None:
    result = search_precision(sensitive_mlp(0), feeds(0), precision="fp16",
                              budget=AccuracyBudget(min_cosine=0.999))
    by_name = {node.name: node for node in result.kept_fp32_nodes}
    square = by_name["rms_square"]
    assert square.op_type == "Mul" and square.sensitivity == float("inf")
    assert "past the float16 maximum 65504" in square.reason
    shift = by_name["shift_down"]
    assert 0.1 < shift.sensitivity < float("inf") and "amplifies" in shift.reason
    assert assert_strict_json(result)["kept_fp32_nodes"][0]["sensitivity"] is None


def test_model_already_within_budget_keeps_nothing_more() -> None:
    model = models.mlp(seed=4)
    result = search_precision(model, feeds(4, "input"), precision="fp16",
                              budget=AccuracyBudget(min_cosine=0.999, max_abs_err=0.05))
    assert result.within_budget and result.kept_fp32_nodes == ()
    assert result.evaluations == 1 and result.sensitivity_passes == 0
    default, report = convert_precision(model, "fp16")
    assert result.converted == report.converted == len(model.graph.node)
    assert result.model.SerializeToString() == default.SerializeToString()
    assert "with the keep-list alone" in result.describe()


def test_unreachable_budget_reports_the_closest_conversion_within_the_evaluation_limit() -> None:
    model = models.mlp(seed=5)
    budget = AccuracyBudget(min_cosine=1.0, max_abs_err=0.0)
    result = search_precision(model, feeds(5, "input"), precision="fp16", budget=budget,
                              max_evaluations=12)
    assert not result.within_budget
    assert result.evaluations <= 12
    assert result.converted >= 1  # never "keep everything": that converts nothing
    assert {failure.metric for failure in result.failures} >= {"elementwise"}
    assert result.describe().startswith("No fp16 conversion within the budget (cosine >= 1.0, "
                                        "max abs error <= 0.0) was found")
    data = assert_strict_json(result)
    assert data["within_budget"] is False and data["failures"]


def test_search_stops_at_the_evaluation_limit_with_the_closest_found() -> None:
    model, samples = sensitive_mlp(0), feeds(0)
    budget = AccuracyBudget(min_cosine=0.999)
    result = search_precision(model, samples, precision="fp16", budget=budget,
                              max_evaluations=3)
    assert result.evaluations == 3 and result.sensitivity_passes == 1
    assert not result.within_budget
    # The closest found is better than the default conversion and is what the model holds.
    default, _ = convert_precision(model, "fp16")
    before = evaluate_precision(model, default, samples, precision="fp16",
                                tolerances=budget.tolerances()).validation.outputs[0]
    after = evaluate_precision(model, result.model, samples, precision="fp16",
                               tolerances=budget.tolerances()).validation.outputs[0]
    assert after.cosine_similarity == pytest.approx(result.accuracy.cosine)
    assert after.cosine_similarity > before.cosine_similarity


def test_top1_budget_counts_class_score_outputs() -> None:
    result = search_precision(sensitive_mlp(2), feeds(2), precision="bf16",
                              budget=AccuracyBudget(min_top1_agreement=1.0))
    assert result.within_budget and result.accuracy.top1_agreement == 1.0
    assert kept_names(result) <= SHIFT


def test_top1_budget_without_class_scores_is_refused() -> None:
    model = loud_layer_norm("op")  # y [1, 8, 8]: one vector per token, not class scores
    samples = feeds(0, "x", (1, 8, 32), count=1)
    with pytest.raises(ValueError, match="no output of class scores"):
        search_precision(model, samples, precision="fp16",
                         budget=AccuracyBudget(min_top1_agreement=0.99))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "needs at least one"),
    ({"min_cosine": 1.5}, "min_cosine must be a finite number in"),
    ({"max_abs_err": -1.0}, "max_abs_err"),
    ({"min_top1_agreement": float("nan")}, "min_top1_agreement"),
])
def test_budget_rejects_missing_or_out_of_range_limits(kwargs: dict[str, float],
                                                       match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AccuracyBudget(**kwargs)


def test_budget_maps_onto_tolerances() -> None:
    tolerances = AccuracyBudget(min_cosine=0.99, max_abs_err=0.1,
                                min_top1_agreement=0.98).tolerances()
    assert (tolerances.atol, tolerances.rtol, tolerances.min_cosine,
            tolerances.min_top1_agreement) == (0.1, 0.0, 0.99, 0.98)
