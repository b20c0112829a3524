"""What `fuseforge jobs` prints of a job: the server's `outcome` in its own words where the job
has one, and the same facts from the older fields (speedup, speedup_verdict, the int8 report's
`shipped`) where the server predates it."""

from __future__ import annotations

from typing import Any

from fuseforge_cli.job_lines import headline, job_table, shipped, show_lines
from fuseforge_client import Job

JOB_ID = "5d1c9a2e-7f3b-4e8a-b6d4-2c9e0f1a3b57"
HEADLINE = ("Shipped the onnxruntime fp32 engine (int8 asked): no measurable difference in "
            "speed (1.04x, 0.92-1.09), accuracy passed.")
OUTCOME = {
    "asked": {"backend": "onnxruntime", "precision": "int8", "mode": "dynamic", "passes": "all",
              "search": False},
    "shipped": {"what": "engine", "backend": "onnxruntime", "precision": "fp32",
                "passes": ["FoldBatchNormIntoConv"], "label": "onnxruntime fp32 engine"},
    "speedup": {"value": 1.04, "ci_low": 0.92, "ci_high": 1.09,
                "verdict": "no measurable difference"},
    "accuracy": {"verdict": "passed", "worst": {"output": "logits", "metric": "cosine_similarity",
                                                "value": 0.9995, "limit": 0.99, "text": None}},
    "why": "int8 was asked; fp32 shipped: the quantizer found no MatMul/Conv to quantize.",
    "headline": HEADLINE,
}


def _job(**fields: Any) -> Job:
    return Job.from_json({"id": JOB_ID, "model_id": "e3bddc0a-eb3c-4eda-9706-20bbcdb90d3a",
                          "model_name": "resnet-block.onnx", "status": "succeeded",
                          "stage": "done", "progress": 1.0, "backend": "onnxruntime",
                          "precision": "int8", **fields})


def test_a_job_with_an_outcome_prints_it_as_the_server_words_it() -> None:
    job = _job(outcome=OUTCOME, config={"backend": "onnxruntime", "precision": "int8",
                                        "quantization": {"mode": "dynamic"}},
               speedup=1.04, speedup_verdict="no measurable difference")

    assert headline(job) == HEADLINE
    assert shipped(job) == "onnxruntime fp32 engine"
    lines = show_lines(job, base_url="http://fuseforge:8000")
    assert lines[:5] == [
        f"job {JOB_ID} (resnet-block.onnx): succeeded",
        f"  {HEADLINE}",
        "  asked:    onnxruntime int8 dynamic",
        "  shipped:  onnxruntime fp32 engine",
        f"  why:      {OUTCOME['why']}",
    ]
    assert "  speed-up: 1.04x (0.92-1.09): no measurable difference" in lines
    assert "  accuracy: passed (worst: logits cosine_similarity 0.9995 (limit 0.99))" in lines
    assert lines[-1] == f"  page:     http://fuseforge:8000/ui/jobs/{JOB_ID}"


def test_without_an_outcome_int8_asked_and_fp32_shipped_shows_as_such() -> None:
    # A server older than `outcome`: the int8 report says what shipped.
    job = _job(config={"backend": "onnxruntime", "precision": "int8"},
               accuracy_report={"quantization": {"shipped": "fp32", "why": "nothing to quantize"}},
               speedup=1.04, speedup_ci_low=0.92, speedup_ci_high=1.09,
               speedup_verdict="no measurable difference", validation_passed=True)

    assert shipped(job) == "onnxruntime fp32 engine"
    assert headline(job) == HEADLINE  # in the words the server's outcome would use
    lines = show_lines(job, base_url="http://fuseforge:8000")
    assert "  asked:    onnxruntime int8" in lines and "  why:      nothing to quantize" in lines


def test_the_table_gives_each_job_one_row_with_its_id_prefix() -> None:
    queued = Job.from_json({"id": "0f0f0f0f-0000-4000-8000-000000000000",
                            "model_id": "e3bddc0a-eb3c-4eda-9706-20bbcdb90d3a",
                            "model_name": "a-model-with-a-rather-long-name-indeed.onnx",
                            "status": "queued", "stage": None, "progress": 0.0,
                            "status_detail": "waiting for a worker"})
    header, first, second = job_table([_job(outcome=OUTCOME), queued])

    assert header.split() == ["ID", "MODEL", "STATUS", "SHIPPED", "HEADLINE"]
    assert first.startswith("5d1c9a2e  resnet-block.onnx")
    assert "onnxruntime fp32 engine" in first and first.endswith("...")  # cut to one line
    assert second.startswith("0f0f0f0f  a-model-with-a-rather-lon...")
    assert second.endswith("queued: waiting for a worker")
