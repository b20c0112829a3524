"""`fuseforge submit --wait`'s summary of a succeeded job: the server's headline word for word,
why shipped differs from asked, and never a bare median speed-up where the verdict says there
is no difference."""

from __future__ import annotations

from typing import Any

from core.outcome import job_outcome
from fuseforge_cli.submit_command import finished_summary
from fuseforge_client import Job

_QUANTIZER = "int8 (dynamic) ran at 0.980x [0.950, 1.020] the fp32 model's time: not faster"
_NO_DIFFERENCE = {"suite": "comparison", "variant": "engine", "speedup_vs_reference": 1.04,
                  "speedup_ci_low": 0.92, "speedup_ci_high": 1.09,
                  "speedup_verdict": "no measurable difference"}


def _job(outcome: dict[str, Any] | None, **document: Any) -> Job:
    return Job.from_json({"id": "j1", "model_id": "m1", "status": "succeeded", "stage": "done",
                          "progress": 1.0, "error": None, "artifacts": [],
                          "config": {"backend": "onnxruntime", "precision": "int8"},
                          "benchmarks": [_NO_DIFFERENCE], "outcome": outcome, **document})


def test_the_summary_leads_with_the_servers_headline_and_why() -> None:
    accuracy_report = {"quantization": {"shipped": "fp32", "why": _QUANTIZER}}
    outcome = job_outcome(config={"precision": "int8"}, status="succeeded",
                          reports={"accuracy_report": accuracy_report},
                          engine_record=_NO_DIFFERENCE,
                          validation={"passed": True, "outputs": []}).model_dump(mode="json")

    lines = finished_summary(_job(outcome, accuracy_report=accuracy_report)).splitlines()

    assert lines[0] == f"job j1 succeeded: {outcome['headline']}"
    assert lines[0] == ("job j1 succeeded: Shipped the onnxruntime fp32 engine (int8 asked): no "
                        "measurable difference in speed (1.04x, 0.92-1.09), accuracy passed.")
    assert lines[1] == f"why: int8 was asked; fp32 shipped: {_QUANTIZER}."
    assert not any(line.startswith("int8: fp32 shipped") for line in lines)  # said once
    assert not any("the original's speed" in line for line in lines)


def test_without_an_outcome_the_summary_still_says_the_verdict_not_the_median() -> None:
    [line] = finished_summary(_job(None, validation={"passed": True})).splitlines()

    assert line == ("job j1 succeeded: validation passed, engine speed: no measurable "
                    "difference (1.04x, 0.92-1.09) (onnxruntime, int8)")
