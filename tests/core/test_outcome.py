"""A finished job's outcome from what it recorded (core/outcome.py): an engine that shipped
faster, int8 asked and fp32 shipped with the quantizer's reason, a search that shipped int8, the
original shipped when nothing beat it, a failed and a cancelled job; the speed-up always in the
verdict's words."""

from typing import Any

from core.outcome import Speedup, job_outcome, speedup_words

_FUSED = {"passes_run": ["cleanup", "fold_batch_norm"], "backend": "onnxruntime"}


def _record(value: float, low: float, high: float, verdict: str) -> dict[str, Any]:
    return {"variant": "engine", "speedup_vs_reference": value, "speedup_ci_low": low,
            "speedup_ci_high": high, "speedup_verdict": verdict}


def _validation(passed: bool = True, cosine: float = 0.99995) -> dict[str, Any]:
    failures = [] if passed else [{
        "output": "logits", "metric": "cosine_similarity", "value": cosine, "limit": 0.9999,
        "excess": 0.0009, "message": f"logits: cosine similarity {cosine} < 0.9999"}]
    return {"passed": passed, "tolerances": {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.9999},
            "outputs": [{"name": "logits", "cosine_similarity": cosine, "max_abs_err": 2e-7},
                        {"name": "boxes", "cosine_similarity": 0.999999, "max_abs_err": 1e-7}],
            "failures": failures}


def test_an_engine_that_shipped_faster_says_so_with_its_interval() -> None:
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "fp32", "passes": "all"},
        status="succeeded", reports={"fusion_report": _FUSED},
        engine_record=_record(1.52, 1.48, 1.57, "faster"), validation=_validation())

    assert outcome.asked.precision == "fp32" and outcome.asked.search is False
    assert outcome.shipped is not None and outcome.shipped.what == "engine"
    assert outcome.shipped.passes == ["cleanup", "fold_batch_norm"]
    assert outcome.shipped.label == "onnxruntime fp32 engine"
    assert outcome.speedup is not None and outcome.speedup.verdict == "faster"
    assert outcome.accuracy is not None and outcome.accuracy.verdict == "passed"
    assert outcome.accuracy.worst is not None and outcome.accuracy.worst.output == "logits"
    assert outcome.why is None
    assert outcome.headline == ("Shipped the onnxruntime fp32 engine: 1.52x faster (1.48-1.57), "
                                "accuracy passed.")


def test_shipped_lists_only_the_passes_that_rewrote_the_graph() -> None:
    fusion = {**_FUSED, "passes_run": ["cleanup", "fold_batch_norm", "fuse_gelu"],
              "rules": [{"pass_name": "cleanup", "rule": "cleanup", "applied": 3},
                        {"pass_name": "fold_batch_norm", "rule": "FoldBatchNormIntoConv",
                         "applied": 0},
                        {"pass_name": "fuse_gelu", "rule": "FuseGelu", "applied": 2}]}
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "fp32", "passes": "all"},
        status="succeeded", reports={"fusion_report": fusion},
        engine_record=_record(1.2, 1.1, 1.3, "faster"), validation=_validation())

    assert outcome.shipped is not None and outcome.shipped.passes == ["cleanup", "fuse_gelu"]


def test_int8_asked_fp32_shipped_names_the_quantizers_reason() -> None:
    why = ("the quantizer found no op it quantizes in this model (it has Cos, Exp): no int8 "
           "form exists; the fp32 model ships")
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "int8",
                "quantization": {"mode": "dynamic"}},
        status="succeeded",
        reports={"fusion_report": _FUSED,
                 "accuracy_report": {"quantization": {"shipped": "fp32", "why": why}}},
        engine_record=_record(1.04, 0.92, 1.09, "no measurable difference"),
        validation=_validation())

    assert outcome.asked.precision == "int8" and outcome.asked.mode == "dynamic"
    assert outcome.shipped is not None and outcome.shipped.precision == "fp32"
    # The quantizer's reason, without its "the fp32 model ships" the sentence already says.
    assert outcome.why == ("int8 was asked; fp32 shipped: the quantizer found no op it quantizes "
                           "in this model (it has Cos, Exp): no int8 form exists.")
    assert "budget" not in outcome.why
    assert outcome.headline == (
        "Shipped the onnxruntime fp32 engine (int8 asked): no measurable difference in speed "
        "(1.04x, 0.92-1.09), accuracy passed.")
    assert "faster" not in outcome.headline


def test_a_search_that_shipped_int8_says_search_asked_int8_shipped() -> None:
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "fp32",
                "search": {"strategy": "min_latency"}},
        status="succeeded",
        reports={"fusion_report": _FUSED,
                 "search_report": {"winner": "int8/all", "why": "fastest within budget",
                                   "recipe": {"backend": "onnxruntime", "precision": "int8"}},
                 "accuracy_report": {"quantization": {"shipped": "int8", "why": "faster"}}},
        engine_record=_record(1.9, 1.8, 2.0, "faster"), validation=_validation())

    assert outcome.asked.search is True
    assert outcome.shipped is not None and outcome.shipped.precision == "int8"
    assert outcome.why == "the search shipped int8/all: fastest within budget."
    assert outcome.headline.startswith("Shipped the onnxruntime int8 engine (search asked): "
                                       "1.90x faster")


def test_the_original_shipped_when_nothing_beat_it() -> None:
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "fp32"}, status="succeeded",
        reports={"fusion_report": _FUSED, "accuracy_report": {"fallback": {"kept": "x"}}},
        engine_record=_record(0.82, 0.80, 0.85, "slower"), validation=_validation(),
        original_shipped="no engine that validated was faster than the original (the "
                         "fastest ran at 0.82x)")

    assert outcome.shipped is not None and outcome.shipped.what == "original"
    assert outcome.shipped.label == "original model" and outcome.shipped.passes == []
    assert outcome.speedup is None and outcome.accuracy is None
    assert outcome.why == ("no engine that validated was faster than the original (the "
                           "fastest ran at 0.82x).")
    assert outcome.headline == (
        "Shipped your original model unchanged (onnxruntime fp32 asked): no engine that "
        "validated was faster than the original (the fastest ran at 0.82x).")


def test_the_original_ships_on_the_backend_its_user_runs_it_on() -> None:
    # An OpenVINO job whose IR lost: what ships is the upload at ONNX Runtime's default level.
    outcome = job_outcome(
        config={"backend": "openvino", "precision": "bf16"}, status="succeeded",
        reports={"fusion_report": _FUSED}, validation=_validation(),
        original_shipped="the engine measured 0.91x the original's speed",
        original_backend="onnxruntime")

    assert outcome.shipped is not None and outcome.shipped.what == "original"
    assert (outcome.shipped.backend, outcome.shipped.precision) == ("onnxruntime", "fp32")
    assert outcome.headline.startswith(
        "Shipped your original model unchanged (openvino bf16 asked): ")


def test_a_fallback_engine_says_why_it_differs() -> None:
    outcome = job_outcome(
        config={"backend": "onnxruntime", "precision": "fp32"}, status="succeeded",
        reports={"fusion_report": {"passes_run": []},
                 "accuracy_report": {"fallback": {"kept": "no fusion passes"}}},
        engine_record=_record(1.2, 1.1, 1.3, "faster"), validation=_validation())

    assert outcome.why == ("the job's own engine failed validation; it fell back to no fusion "
                           "passes.")


def test_a_failed_job_shipped_nothing_and_quotes_its_error() -> None:
    outcome = job_outcome(
        config={"backend": "tensorrt", "precision": "fp16"}, status="failed",
        error=("AccuracyMismatchError", "The engine of job 1 failed validation: logits cosine "
                                        "0.99878 < 0.9999. Build at a higher precision."))

    assert outcome.shipped is None and outcome.speedup is None and outcome.accuracy is None
    assert outcome.why == ("The engine of job 1 failed validation: logits cosine 0.99878 < "
                           "0.9999.")
    assert outcome.headline == (
        "Failed (AccuracyMismatchError), nothing shipped (tensorrt fp16 asked): The engine of "
        "job 1 failed validation: logits cosine 0.99878 < 0.9999.")


def test_a_job_failed_by_its_verdict_names_the_worst_metric() -> None:
    outcome = job_outcome(config={}, status="failed",
                          error=("AccuracyMismatchError", "logits out of tolerance"),
                          validation=_validation(passed=False, cosine=0.99878))

    assert outcome.shipped is None
    assert outcome.accuracy is not None and outcome.accuracy.verdict == "failed"
    assert outcome.accuracy.worst is not None and outcome.accuracy.worst.value == 0.99878


def test_a_cancelled_job_shipped_nothing() -> None:
    outcome = job_outcome(config={"precision": "int8"}, status="cancelled")

    assert outcome.shipped is None
    assert outcome.asked.mode == "auto"
    assert outcome.headline == "Cancelled: nothing shipped (onnxruntime int8 asked)."


def test_a_failed_accuracy_verdict_names_the_broken_limit() -> None:
    outcome = job_outcome(config={}, status="succeeded", reports={"fusion_report": _FUSED},
                          validation=_validation(passed=False, cosine=0.99878))

    assert outcome.accuracy is not None and outcome.accuracy.verdict == "failed"
    assert outcome.accuracy.worst is not None
    assert outcome.accuracy.worst.value == 0.99878 and outcome.accuracy.worst.limit == 0.9999
    assert outcome.headline.endswith("not benchmarked, accuracy failed.")


def test_speedup_words_follow_the_verdict_never_the_bare_median() -> None:
    assert speedup_words(Speedup(value=1.04, ci_low=0.92, ci_high=1.09,
                                 verdict="no measurable difference")) == \
        "no measurable difference in speed (1.04x, 0.92-1.09)"
    assert speedup_words(Speedup(value=0.82, ci_low=0.80, ci_high=0.85, verdict="slower")) == \
        "slower than the original (0.82x, 0.80-0.85)"
    assert speedup_words(Speedup(value=1.3)) == \
        "1.30x the original's speed (no interval to judge it by)"
    assert speedup_words(None) == "not benchmarked"
