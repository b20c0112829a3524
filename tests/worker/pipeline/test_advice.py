"""failure_advice: what a failed job is told to change fits its precision and its options."""

from __future__ import annotations

import numpy as np

from core.job_config import JobConfig
from optimizer.validation import ValidationReport, compare_outputs, default_tolerances
from worker.pipeline.advice import failure_advice


def _failed(precision: str) -> ValidationReport:
    ref = np.linspace(-1, 1, 64, dtype=np.float32)
    report = compare_outputs([{"y": ref}], [{"y": ref + np.float32(0.5)}],
                             default_tolerances(precision))
    assert not report.passed
    return report


def test_an_fp32_job_is_never_told_to_build_at_a_higher_precision() -> None:
    advice = failure_advice(JobConfig(), _failed("fp32"), blamed=("FoldBatchNormIntoConv",),
                            blamed_passes=("fold_batch_norm",))

    assert "precision" not in advice and "fp32" not in advice
    assert advice.startswith("To pass, leave out pass(es) fold_batch_norm (holding rule(s) "
                             "FoldBatchNormIntoConv) by listing the passes to keep in `passes`; "
                             'or set "on_validation_failure": "fallback"')
    assert advice.endswith("loosen atol (now 0.0001), rtol (now 0.001), min_cosine (now "
                           "0.9999) in the job's validation tolerances.")


def test_an_fp16_job_is_told_fp32_and_not_a_fallback_it_cannot_take() -> None:
    advice = failure_advice(JobConfig(precision="fp16"), _failed("fp16"), falls_back=False)

    assert advice.startswith("To pass, build at fp32 instead of fp16. ")
    assert "fallback" not in advice


def test_a_job_that_already_falls_back_is_not_told_to() -> None:
    config = JobConfig(on_validation_failure="fallback")

    assert failure_advice(config, _failed("fp32")).startswith("If differences of this size")
