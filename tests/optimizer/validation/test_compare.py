"""compare_outputs and validate: which differences pass, which fail, and what is reported."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import AccuracyMismatchError, DatasetError, InternalError
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.validation import compare_outputs, default_tolerances, validate
from optimizer.validation.compare import MetricFailure

FP32 = default_tolerances("fp32")


def _logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 10)).astype(np.float32)


def test_compare_outputs_passes_an_exact_match_with_zero_error():
    ref = [{"logits": _logits(0)}, {"logits": _logits(1)}]

    report = compare_outputs(ref, [dict(sample) for sample in ref], FP32)

    assert report.passed and report.samples == 2
    (output,) = report.outputs
    assert (output.name, output.max_abs_err, output.max_rel_err, output.mean_abs_err) == \
        ("logits", 0.0, 0.0, 0.0)
    assert output.cosine_similarity == pytest.approx(1.0)


def test_compare_outputs_passes_a_perturbation_within_tolerance():
    ref = _logits()

    report = compare_outputs([{"logits": ref}], [{"logits": ref + np.float32(5e-5)}], FP32)

    assert report.passed
    assert report.outputs[0].max_abs_err == pytest.approx(5e-5, rel=1e-2)


def test_compare_outputs_fails_a_perturbation_beyond_tolerance():
    ref = _logits()
    cand = ref.copy()
    cand[1, 3] += 0.01

    report = compare_outputs([{"logits": ref}], [{"logits": cand}], FP32)

    assert not report.passed
    assert report.outputs[0].max_abs_err == pytest.approx(0.01, rel=1e-3)


def test_compare_outputs_fails_on_cosine_even_within_elementwise_tolerance():
    # RMS 0.03, above atol=1e-2: the output has energy, so its cosine is judged. Every small
    # element drifts by 0.009 (within atol) and together they turn the vector away.
    ref = np.zeros(1001, np.float32)
    ref[0] = 1.0
    cand = ref + np.float32(0.009)
    cand[0] = 1.0

    report = compare_outputs([{"y": ref}], [{"y": cand}], default_tolerances("fp16"))

    assert not report.passed
    (failure,) = report.failures
    assert failure.metric == "cosine_similarity" and failure.value < 0.97
    assert "(reference RMS 0.0316, max |error| 0.009)" in failure.message
    assert report.outputs[0].not_judged == ()


def test_a_near_zero_output_is_judged_by_absolute_error_not_cosine():
    # Was: an output of 1e-3 everywhere, negated, failed fp16 on cosine -1 though every element
    # is within atol=1e-2; near zero, the absolute tolerance decides (numpy's allclose agrees).
    ref = np.random.default_rng(3).uniform(0, 2e-7, (4, 64)).astype(np.float32)
    cand = ref + np.random.default_rng(4).normal(0, 3e-8, ref.shape).astype(np.float32)

    report = compare_outputs([{"y": ref}], [{"y": cand}], FP32)

    assert report.passed
    (output,) = report.outputs
    assert output.cosine_similarity < FP32.min_cosine  # would have failed before
    assert output.not_judged == ("cosine_similarity",)
    assert output.not_judged_why.startswith("cosine similarity not judged: the reference's RMS ")
    assert "at or below atol=0.0001" in output.not_judged_why
    assert output.reference_rms == pytest.approx(float(np.sqrt(np.mean(ref.astype(np.float64) ** 2))))
    assert json.loads(json.dumps(output.to_dict(), allow_nan=False))["not_judged"] == \
        ["cosine_similarity"]


def test_a_real_error_on_a_near_zero_output_still_fails_by_atol():
    ref = np.random.default_rng(3).uniform(0, 2e-7, (4, 64)).astype(np.float32)
    cand = ref.copy()
    cand[2, 5] += np.float32(5e-4)

    report = compare_outputs([{"y": ref}], [{"y": cand}], FP32)

    assert not report.passed
    (failure,) = report.failures
    assert failure.metric == "elementwise"
    assert "1 of 256 elements" in failure.message and "atol=0.0001" in failure.message
    assert report.outputs[0].not_judged == ("cosine_similarity",)


def test_near_zero_outputs_leave_snr_and_relative_error_unjudged_too():
    ref = np.full(50, 1e-6, np.float32)
    strict = FP32.with_overrides({"min_snr_db": 60.0, "max_rel_err": 1e-3})

    report = compare_outputs([{"y": ref}], [{"y": ref * np.float32(1.5)}], strict)

    assert report.passed
    assert report.outputs[0].not_judged == ("cosine_similarity", "snr_db", "max_rel_err")


def test_an_infinite_atol_leaves_the_cosine_judged_on_any_scale():
    ref = np.full(100, 1e-3, np.float32)

    report = compare_outputs([{"y": ref}], [{"y": -ref}], default_tolerances("int8"))

    assert not report.passed
    assert [f.metric for f in report.failures] == ["cosine_similarity"]


def test_bf16_is_judged_by_cosine_not_by_its_worst_element():
    # A detector's probability map: bf16's rounding tips a few values on the sigmoid's slope
    # far (here 0.6) while the map as a whole agrees (cosine >= 0.999).
    probabilities = np.random.default_rng(0).uniform(0, 1, (1, 1, 64, 64)).astype(np.float32)
    tipped = probabilities.copy()
    tipped[0, 0, 10, 10:13] = np.clip(tipped[0, 0, 10, 10:13] + 0.6, 0, 1)
    bf16 = default_tolerances("bf16")

    assert compare_outputs([{"map": probabilities}], [{"map": tipped}], bf16).passed
    # ...but a map that moved everywhere fails, by the cosine it is judged by.
    moved = np.clip(probabilities + np.random.default_rng(1).normal(0, 0.1, probabilities.shape),
                    0, 1).astype(np.float32)
    report = compare_outputs([{"map": probabilities}], [{"map": moved}], bf16)
    assert not report.passed
    assert [f.metric for f in report.failures] == ["cosine_similarity"]


def test_compare_outputs_fails_a_nan_the_reference_does_not_have():
    ref = _logits()
    cand = ref.copy()
    cand[0, 0] = np.nan

    report = compare_outputs([{"logits": ref}], [{"logits": cand}], FP32)

    assert not report.passed
    assert report.outputs[0].max_abs_err == math.inf


def test_compare_outputs_passes_nan_and_inf_where_the_reference_has_them():
    ref = _logits()
    ref[0, 0], ref[0, 1] = np.nan, -np.inf

    report = compare_outputs([{"logits": ref}], [{"logits": ref.copy()}], FP32)

    assert report.passed and report.outputs[0].max_abs_err == 0.0


def test_compare_outputs_counts_two_all_zero_outputs_as_cosine_one():
    zeros = np.zeros((2, 4), np.float32)

    report = compare_outputs([{"y": zeros}], [{"y": zeros.copy()}], FP32)

    assert report.passed and report.outputs[0].cosine_similarity == 1.0


def test_compare_outputs_keeps_relative_error_finite_against_a_zero_reference():
    ref = np.array([0.0, 1.0], np.float32)

    report = compare_outputs([{"y": ref}], [{"y": ref + np.float32(1e-7)}], FP32)

    assert report.passed and math.isfinite(report.outputs[0].max_rel_err)


def test_compare_outputs_aggregates_errors_over_all_samples():
    ref = np.zeros(4, np.float32)
    cand_a, cand_b = ref.copy(), ref.copy()
    cand_a[0], cand_b[1] = 1e-5, 3e-5

    report = compare_outputs([{"y": ref}, {"y": ref}], [{"y": cand_a}, {"y": cand_b}], FP32)

    output = report.outputs[0]
    assert output.max_abs_err == pytest.approx(3e-5)
    assert output.mean_abs_err == pytest.approx(4e-5 / 8)


def test_compare_outputs_fails_a_missing_output_with_infinite_errors():
    report = compare_outputs([{"a": _logits(), "b": _logits()}], [{"a": _logits()}], FP32)

    assert not report.passed
    a, b = report.outputs
    assert a.passed and not b.passed
    assert b.max_abs_err == b.max_rel_err == b.mean_abs_err == math.inf


def test_compare_outputs_fails_a_shape_mismatch_with_infinite_errors():
    report = compare_outputs([{"y": _logits()}], [{"y": _logits()[:1]}], FP32)

    assert not report.passed and report.outputs[0].max_abs_err == math.inf


def test_compare_outputs_fails_a_dtype_mismatch_even_when_values_agree():
    ref = _logits()

    report = compare_outputs([{"y": ref}], [{"y": ref.astype(np.float16).astype(np.float64)}],
                             default_tolerances("fp16"))

    assert not report.passed and report.outputs[0].max_abs_err < 1e-2


def test_compare_outputs_refuses_different_sample_counts():
    with pytest.raises(InternalError, match="1 reference samples but 2 candidate samples"):
        compare_outputs([{"y": _logits()}], [{"y": _logits()}, {"y": _logits()}], FP32)


def test_validation_report_to_dict_is_strict_json_even_with_infinite_errors():
    report = compare_outputs([{"y": _logits()}], [{}], FP32)

    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["passed"] is False
    assert data["outputs"][0]["max_abs_err"] is None
    assert data["tolerances"] == {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.9999}
    assert data["failures"] == [{"output": "y", "metric": "missing", "value": "missing",
                                 "limit": "present", "excess": None,
                                 "message": "output 'y' is missing from the candidate's outputs"}]


def test_raise_if_failed_names_each_broken_limit_of_the_failing_output():
    ref = _logits()
    report = compare_outputs([{"logits": ref, "ok": ref}], [{"logits": ref + 1, "ok": ref}],
                             FP32)

    with pytest.raises(AccuracyMismatchError) as caught:
        report.raise_if_failed("engine for job 7")
    message = str(caught.value)
    assert message.startswith("The outputs of engine for job 7 differ")
    assert "output 'logits': 20 of 20 elements (100.00%) differ by more than atol + " \
        "rtol*|reference| (atol=0.0001, rtol=0.001)" in message
    assert "output 'logits': cosine similarity" in message
    assert "'ok'" not in message


def test_raise_if_failed_is_silent_when_the_report_passed():
    compare_outputs([{"y": _logits()}], [{"y": _logits()}], FP32).raise_if_failed("x")


def test_validate_passes_a_model_optimized_by_onnx_runtime_against_the_original(cnn_path):
    feeds = random_feeds([TensorSpec("input", "float32", (1, 3, 32, 32))], count=3, seed=0)

    with OnnxRuntimeRunner(cnn_path) as original, \
            OnnxRuntimeRunner(cnn_path, optimization_level="all") as optimized:
        report = validate(original, optimized, feeds, FP32)

    assert report.passed and report.samples == 3
    assert [output.name for output in report.outputs] == ["logits"]


def _scores(top: list[int], classes: int = 10) -> np.ndarray:
    """[len(top), classes] scores whose row i has its maximum at class top[i]."""
    rows = np.random.default_rng(len(top)).uniform(0, 0.5, (len(top), classes)).astype(np.float32)
    rows[np.arange(len(top)), top] = 1.0
    return rows


def test_report_lists_every_broken_limit_with_value_limit_and_excess():
    rng = np.random.default_rng(11)
    ref = _scores(list(rng.integers(0, 10, 20)))
    cand = ref + rng.normal(0, 0.05, ref.shape).astype(np.float32)
    cand[:4] = _scores([(int(np.argmax(row)) + 1) % 10 for row in ref[:4]])  # 4 of 20 flip
    hidden = rng.standard_normal((2, 3, 4)).astype(np.float32)
    hidden_cand = hidden.copy()
    hidden_cand[0, 0, :2] = np.nan
    tolerances = FP32.with_overrides({"min_snr_db": 40.0, "min_top1_agreement": 0.9})

    report = compare_outputs([{"logits": ref, "hidden": hidden}],
                             [{"logits": cand, "hidden": hidden_cand}], tolerances)

    assert not report.passed
    assert [(f.output, f.metric) for f in report.failures] == [
        ("logits", "elementwise"),
        ("logits", "cosine_similarity"),
        ("logits", "snr_db"),
        ("logits", "top1_agreement"),
        ("hidden", "elementwise"),
        ("hidden", "candidate_nan_count"),
        ("hidden", "snr_db"),  # a NaN is infinite noise; the cosine skips it and stays 1
    ]
    by_metric = {(f.output, f.metric): f for f in report.failures}
    top1 = by_metric["logits", "top1_agreement"]
    assert (top1.value, top1.limit, top1.excess) == (pytest.approx(0.8), 0.9, pytest.approx(0.1))
    assert top1.message == ("output 'logits': top-1 agreement 80.00% is below the minimum "
                            "90.00% by 10.00 points")
    snr = by_metric["logits", "snr_db"]
    logits = report.outputs[0]
    assert snr.value == logits.snr_db < 40.0 and snr.excess == pytest.approx(40.0 - snr.value)
    nans = by_metric["hidden", "candidate_nan_count"]
    assert (nans.value, nans.limit, nans.excess) == (2, 0, 2)
    assert by_metric["hidden", "elementwise"].value == math.inf
    assert [o.passed for o in report.outputs] == [False, False]


def test_failures_name_missing_shape_and_dtype_problems():
    ref = _logits()

    report = compare_outputs(
        [{"gone": ref, "short": ref, "half": ref}],
        [{"short": ref[:1], "half": ref.astype(np.float16)}], default_tolerances("fp16"))

    assert [(f.output, f.metric, f.value, f.limit) for f in report.failures] == [
        ("gone", "missing", "missing", "present"),
        ("short", "shape", "[1, 10]", "[2, 10]"),
        ("half", "dtype", "float16", "float32"),
    ]


def test_optional_limits_are_checked_only_when_set():
    ref = _logits()
    cand = ref + np.float32(5e-5)  # within atol, but well short of 120 dB of SNR

    assert compare_outputs([{"y": ref}], [{"y": cand}], FP32).passed
    strict = FP32.with_overrides({"min_snr_db": 120.0, "max_rmse": 1e-6, "max_rel_err": 1e-6})
    report = compare_outputs([{"y": ref}], [{"y": cand}], strict)
    assert [f.metric for f in report.failures] == ["max_rel_err", "rmse", "snr_db"]


def test_class_limits_skip_outputs_that_are_not_class_scores():
    ref = np.random.default_rng(0).standard_normal((2, 3, 10)).astype(np.float32)
    tolerances = FP32.with_overrides({"min_top1_agreement": 1.0})

    report = compare_outputs([{"tokens": ref}], [{"tokens": -ref}], tolerances)

    assert report.outputs[0].top1_agreement is None
    assert "top1_agreement" not in {f.metric for f in report.failures}


def test_declared_class_outputs_get_top_k_agreement_over_every_leading_row():
    ref = _scores([1, 2, 3, 4, 5, 6]).reshape(2, 3, 10)
    cand = ref.copy()
    cand[1, 2] = _scores([0])[0]

    report = compare_outputs([{"tokens": ref}], [{"tokens": cand}], FP32,
                             class_outputs=["tokens"])

    assert report.outputs[0].top1_agreement == pytest.approx(5 / 6)


def test_declared_class_outputs_must_exist_and_hold_classes():
    ref = {"logits": _logits(), "score": np.zeros((2, 1), np.float32)}

    with pytest.raises(DatasetError, match="'probs'.*its outputs are 'logits', 'score'"):
        compare_outputs([ref], [ref], FP32, class_outputs=["probs"])
    with pytest.raises(DatasetError, match="'score'.*shape \\[2, 1\\] has fewer than 2 classes"):
        compare_outputs([ref], [ref], FP32, class_outputs=["score"])


def test_labels_report_the_accuracy_points_the_candidate_lost():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 10, (50, 1))  # 50 samples, one prediction each
    ref_top = labels[:, 0].copy()
    ref_top[:5] = (ref_top[:5] + 1) % 10  # the original is right 45 times of 50 (90%)
    cand_top = ref_top.copy()
    cand_top[5] = (cand_top[5] + 1) % 10  # the candidate loses one more: 88%
    reference = [{"logits": _scores([int(t)])} for t in ref_top]
    candidate = [{"logits": _scores([int(t)])} for t in cand_top]
    tolerances = FP32.with_overrides({"atol": 10.0, "max_accuracy_drop": 0.01})

    report = compare_outputs(reference, candidate, tolerances, labels=labels)

    (logits,) = report.outputs
    assert (logits.reference_accuracy, logits.candidate_accuracy, logits.accuracy_drop) == \
        (pytest.approx(0.90), pytest.approx(0.88), pytest.approx(0.02))
    (drop,) = [f for f in report.failures if f.metric == "accuracy_drop"]
    assert drop.message == ("output 'logits': accuracy drop 2.00 points is above the maximum "
                            "1.00 points by 1.00 points (accuracy 90.00% for the original, "
                            "88.00% for the candidate)")


def test_labels_must_fit_a_class_score_output():
    sample = {"logits": _logits()}  # 2 predictions per sample

    with pytest.raises(DatasetError, match="3.*per sample, which fits no output"):
        compare_outputs([sample], [sample], FP32, labels=np.zeros((1, 3), np.int64))
    with pytest.raises(DatasetError, match="labels for 2 samples but outputs for 1"):
        compare_outputs([sample], [sample], FP32, labels=np.zeros((2, 2), np.int64))


def test_metric_failure_to_dict_is_strict_json():
    failure = MetricFailure(output="y", metric="elementwise", value=math.inf, limit=1.0,
                            excess=math.inf, message="m")

    assert json.loads(json.dumps(failure.to_dict(), allow_nan=False))["value"] is None


@pytest.mark.parametrize("seed", range(20))
def test_an_unchanged_model_passes_on_every_seed(cnn_path, seed):
    feeds = random_feeds([TensorSpec("input", "float32", (2, 3, 32, 32))], count=2, seed=seed)

    with OnnxRuntimeRunner(cnn_path) as original, OnnxRuntimeRunner(cnn_path) as same:
        report = validate(original, same, feeds, FP32.with_overrides(
            {"min_snr_db": 100.0, "min_top1_agreement": 1.0, "min_top5_agreement": 1.0}))

    assert report.passed, report.failures
    assert report.outputs[0].top1_agreement == 1.0


def _near_zero_map(bias: np.ndarray) -> onnx.ModelProto:
    """y = Sigmoid(x @ w + bias) with bias near -16: a probability map of ~1e-7 everywhere, as a
    text detector's is on random inputs."""
    w = np.random.default_rng(8).normal(0, 0.05, (64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]),
         helper.make_node("Add", ["logits", "bias"], ["shifted"]),
         helper.make_node("Sigmoid", ["shifted"], ["y"])], "near_zero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias.astype(np.float32), "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("change", "passes"), [(0.05, True), (20.0, False)],
                         ids=["rounding_sized", "real_error"])
def test_a_model_with_a_near_zero_output_is_judged_by_absolute_error(
        tmp_path, change: float, passes: bool) -> None:
    bias = np.full(64, -16.0)
    moved = bias + np.random.default_rng(9).normal(0, 0.05, 64)  # ~5% relative in the tail
    if not passes:
        moved[7] += change  # one probability jumps to ~1: a real error
    paths = [tmp_path / "original.onnx", tmp_path / "candidate.onnx"]
    onnx.save(_near_zero_map(bias), paths[0])
    onnx.save(_near_zero_map(moved), paths[1])
    feeds = random_feeds([TensorSpec("x", "float32", (1, 64))], count=4, seed=0)

    with OnnxRuntimeRunner(paths[0]) as reference, OnnxRuntimeRunner(paths[1]) as candidate:
        report = validate(reference, candidate, feeds, FP32)

    (output,) = report.outputs
    assert output.reference_rms < 1e-6 and output.not_judged == ("cosine_similarity",)
    assert report.passed is passes
    if passes:
        assert output.cosine_similarity < FP32.min_cosine  # what used to fail it
    else:
        assert [f.metric for f in report.failures] == ["elementwise"]
