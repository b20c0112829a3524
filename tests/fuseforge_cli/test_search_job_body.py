"""The job body `submit` sends: --search and its options become the "search" object, laid
over a --config's own (that config's search then counts as --search); a search option with
neither is refused naming itself and --search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuseforge_cli.failures import CliFailure
from fuseforge_cli.job_config_file import job_body
from fuseforge_cli.main import _parser


def _body(*argv: str) -> dict[str, object]:
    return job_body(_parser(None).parse_args(["submit", "m.onnx", *argv]))


def test_search_options_become_the_search_object_and_only_the_given_fields() -> None:
    assert _body("--search") == {"search": {}}
    assert _body("--search", "--strategy", "min_latency_under_budget", "--latency-budget-ms",
                 "2.5", "--time-budget-s", "60", "--search-precisions", "fp32,int8",
                 "--no-pass-sets", "--ort-levels", "basic", "--search-threads", "1,2",
                 "--search-backends", "tensorrt,onnxruntime") == {
                     "search": {
                     "strategy": "min_latency_under_budget", "latency_budget_ms": 2.5,
                     "time_budget_s": 60.0, "precisions": ["fp32", "int8"], "pass_sets": False,
                     "ort_levels": ["basic"], "threads": [1, 2],
                     "backends": ["tensorrt", "onnxruntime"]}}
    assert "search" not in _body("--precision", "fp16")


def test_thread_counts_must_be_whole_numbers_of_one_or_more() -> None:
    for bad in ("0,2", "two", ","):
        with pytest.raises(CliFailure, match="thread counts of 1 or more"):
            _body("--search", "--search-threads", bad)


def test_search_options_lay_over_a_configs_search_object(tmp_path: Path) -> None:
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"search": {"time_budget_s": 100, "pass_sets": False}}))
    assert _body("--config", str(config), "--time-budget-s", "30") == {
        "search": {"time_budget_s": 30.0, "pass_sets": False}}


def test_a_search_option_without_search_names_both_flags() -> None:
    with pytest.raises(CliFailure, match=r"--no-pass-sets needs --search.*drop --no-pass-sets"):
        _body("--no-pass-sets")
