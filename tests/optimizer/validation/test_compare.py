"""compare_outputs and validate: which differences pass, which fail, and what is reported."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import AccuracyMismatchError, InternalError
from optimizer.inputs import random_feeds
from optimizer.tensor_specs import TensorSpec
from optimizer.validation import Tolerances, compare_outputs, default_tolerances, validate

FP32 = default_tolerances("fp32")


def _logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 10)).astype(np.float32)


def test_default_tolerances_grow_looser_with_lower_precision():
    fp32, fp16, bf16 = (default_tolerances(p) for p in ("fp32", "fp16", "bf16"))

    assert fp32 == Tolerances(atol=1e-4, rtol=1e-3, min_cosine=0.9999)
    assert fp16 == Tolerances(atol=1e-2, rtol=1e-2, min_cosine=0.999)
    assert bf16 == Tolerances(atol=5e-2, rtol=5e-2, min_cosine=0.995)


def test_default_tolerances_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="'int8'; expected one of fp32, fp16, bf16"):
        default_tolerances("int8")


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
    ref = np.full(100, 1e-3, np.float32)
    cand = -ref  # every element within atol=1e-2, but pointing the other way

    report = compare_outputs([{"y": ref}], [{"y": cand}], default_tolerances("fp16"))

    assert not report.passed and report.outputs[0].cosine_similarity == pytest.approx(-1.0)


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


def test_raise_if_failed_names_the_failing_output_and_tolerances():
    ref = _logits()
    report = compare_outputs([{"logits": ref, "ok": ref}], [{"logits": ref + 1, "ok": ref}],
                             FP32)

    with pytest.raises(AccuracyMismatchError,
                       match=r"engine for job 7 .*atol=0\.0001.*output 'logits': max abs error 1"
                       ) as caught:
        report.raise_if_failed("engine for job 7")
    assert "'ok'" not in str(caught.value)


def test_raise_if_failed_is_silent_when_the_report_passed():
    compare_outputs([{"y": _logits()}], [{"y": _logits()}], FP32).raise_if_failed("x")


def test_validate_passes_a_model_optimized_by_onnx_runtime_against_the_original(cnn_path):
    feeds = random_feeds([TensorSpec("input", "float32", (1, 3, 32, 32))], count=3, seed=0)

    with OnnxRuntimeRunner(cnn_path) as original, \
            OnnxRuntimeRunner(cnn_path, optimization_level="all") as optimized:
        report = validate(original, optimized, feeds, FP32)

    assert report.passed and report.samples == 3
    assert [output.name for output in report.outputs] == ["logits"]
