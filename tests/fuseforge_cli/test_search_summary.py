"""A search job's summary lines: a candidate that was never raced shows dashes where the race's
figures go and its reason on one shortened line; a search without a winner says why."""

from __future__ import annotations

from typing import Any

from fuseforge_cli.search_summary import search_lines, shipped_precision
from fuseforge_client import Job


def _job(report: dict[str, Any] | None) -> Job:
    return Job.from_json({"id": "j1", "model_id": "m1", "status": "succeeded", "stage": "done",
                          "progress": 1.0, "error": None, "artifacts": [],
                          "search_report": report})


def test_an_unraced_candidate_shows_dashes_and_a_shortened_one_line_reason() -> None:
    reason = "EngineBuildError: node 'x' failed\nTraceback line " + "word " * 40
    lines = search_lines(_job({
        "strategy": "min_latency", "winner": None, "why": "no candidate was built",
        "recipe": None, "race": None, "resumed": [], "time_budget_s": 60, "elapsed_s": 3.2,
        "rows": [{"name": "int8-static", "outcome": "failed", "reason": reason,
                  "accuracy": {}}]}))

    assert lines[0] == "search (min_latency): no winner: no candidate was built"
    assert lines[1] == "search: 1 candidate(s) in 3 s of a 60 s budget; nothing raced"
    [row] = [line for line in lines if line.startswith("  int8-static")]
    assert row.split()[1:5] == ["failed", "-", "-", "-"]
    assert "EngineBuildError: node 'x' failed Traceback line" in row
    assert row.endswith("...") and len(row) < 140
    assert not any("recipe" in line for line in lines)  # nothing to pin


def test_a_job_without_a_search_report_has_no_search_lines() -> None:
    assert search_lines(_job(None)) == []
    assert shipped_precision(_job(None)) is None
    assert shipped_precision(_job({"recipe": {"precision": "int8"}})) == "int8"


def test_a_throughput_search_says_how_many_each_candidate_served_and_how_many_at_once() -> None:
    row = {"name": "fp32/all@1t", "outcome": "won", "reason": None, "accuracy": {"cosine": 1.0},
           "latency_ms_p50": 4.0, "latency_ms_p50_ci": [3.9, 4.1], "throughput_per_s": 500.0,
           "requests": 2, "speedup": 1.6}
    report = {"winner": "fp32/all@1t", "why": "fastest", "recipe": None, "race": None,
              "resumed": [], "time_budget_s": 60, "elapsed_s": 3, "rows": [row]}
    lines = search_lines(_job({**report, "strategy": "max_throughput"}))
    header = next(line for line in lines if line.strip().startswith("candidate"))
    assert "served/s" in header
    assert "500.0 (2 at once)" in next(line for line in lines if "fp32/all@1t  " in line)
    # a latency search's table has no such column
    latency = search_lines(_job({**report, "strategy": "min_latency"}))
    assert not any("served/s" in line for line in latency)
