"""`submit`'s search options take their choices from optimizer/search/decision.py and
core/job_config.py without the parser importing them: other commands, `--help` included,
stay quick; a search option's bad value still gets the whole list of choices."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fuseforge_cli.failures import CliFailure
from fuseforge_cli.main import main


def test_building_the_parser_imports_neither_the_strategies_nor_the_job_config() -> None:
    script = ("import sys; from fuseforge_cli.main import _parser; _parser(None); "
              "print(sorted(m for m in ('optimizer.search.decision', 'core.job_config') "
              "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "[]"


@pytest.mark.parametrize(("option", "value", "listed"), [
    ("--strategy", "fastest", "'min_latency', 'max_throughput', 'min_latency_under_budget'"),
    ("--ort-levels", "basic,max", "max is not one of disabled, basic, extended, all"),
    ("--search-precisions", "fp32,fp64", "fp64 is not one of fp32, fp16"),
])
def test_a_bad_search_option_value_is_refused_with_the_choices(
        option: str, value: str, listed: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["submit", "model.onnx", "--search", option, value])
    assert code == 3
    err = capsys.readouterr().err
    assert f"argument {option}" in err and listed in err


def test_a_search_option_parses_into_the_list_sent() -> None:
    from fuseforge_cli.main import _parser

    args = _parser(None).parse_args(["submit", "m.onnx", "--search", "--ort-levels",
                                     "basic, all", "--search-precisions", "fp32,int8"])
    assert (args.search_ort_levels, args.search_precisions) == (["basic", "all"],
                                                                 ["fp32", "int8"])
    with pytest.raises(CliFailure, match="give at least one"):
        _parser(None).parse_args(["submit", "m.onnx", "--search", "--ort-levels", ","])
