"""The README's fp32 example, as a job, on a real detector export: PP-OCRv5's text detector from
its PyPI wheel (Paddle2ONNX), every pass, at 1x3x640x640. Its probability map is near zero on
random inputs, where the cosine of the old gate failed it at 0.9988 with a largest error of
2.4e-7 (issue 45): the job must pass, and its outcome say what shipped in the API's words."""

from __future__ import annotations

from pathlib import Path

from tests.support.embedded_worker import EmbeddedWorker
from tests.support.packaged_wheels import PPOCRV5_DETECTOR, packaged_model

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}


def test_the_readme_fp32_example_passes_on_the_ppocrv5_detector(
        embedded: EmbeddedWorker, tmp_path: Path) -> None:
    detector = packaged_model(PPOCRV5_DETECTOR, tmp_path)
    model_id = embedded.upload(detector.read_bytes(), "ppocrv5_det.onnx")

    job = embedded.wait(embedded.submit(
        model_id, backend="onnxruntime", precision="fp32", passes="all",
        input_shapes={"x": [1, 3, 640, 640]}, benchmark=FAST_BENCHMARK))

    assert job["status"] == "succeeded", job["error"]
    assert job["validation"]["passed"] is True
    assert job["accuracy_report"]["passed_first_time"] is True
    assert job["accuracy_report"].get("fallback") is None
    (output,) = job["validation"]["outputs"]
    assert output["max_abs_err"] < output["atol"]
    outcome = job["outcome"]
    assert outcome["shipped"]["what"] == "engine"
    assert (outcome["shipped"]["backend"], outcome["shipped"]["precision"]) == ("onnxruntime",
                                                                                "fp32")
    assert outcome["accuracy"]["verdict"] == "passed"
    assert outcome["headline"].startswith("Shipped the onnxruntime fp32 engine")
    assert outcome["why"] is None
