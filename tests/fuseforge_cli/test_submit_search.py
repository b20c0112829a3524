"""`fuseforge submit --search` against a real FuseForge (API server, worker, PostgreSQL, Redis):
the options become the job's search config, the finished job's summary has the winner, why, a
line per candidate and the recipe; a search option without --search is refused before any
request, and a search job that also sets --precision gets the server's reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest

from optimizer.testing.quantization_models import conv_stack
from tests.e2e.stacks import running_stack
from tests.support.broker import TEST_REDIS_URL

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FAST = {"benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}
# A table line: two spaces, then the candidate's name and its outcome.
_ROW = re.compile(r"^  (\S+)\s+(won|slower|over_latency_budget|out_of_accuracy_budget|refused|"
                  r"failed|not_tried)\b")


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_stack(tmp_path_factory.mktemp("search"), name="submit_search",
                       redis_url=TEST_REDIS_URL, queues="cpu") as stack:
        yield stack.base_url


@pytest.fixture
def convnet(tmp_path: Path) -> str:
    path = tmp_path / "convnet.onnx"
    onnx.save(conv_stack(seed=uuid.uuid4().int % 1000, channels=16, size=16, blocks=1), path)
    return str(path)


def _submit(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL=url)
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "submit", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


def _config(tmp_path: Path, body: object) -> str:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_search_sends_the_search_config_and_prints_the_winner_table_and_recipe(
        base_url: str, convnet: str, tmp_path: Path) -> None:
    run = _submit(convnet, "--search", "--time-budget-s", "60", "--search-precisions", "fp32",
                  "--config", _config(tmp_path, FAST), "--wait", url=base_url)

    assert run.returncode == 0, run.stderr
    [job_id] = re.findall(r"job (\S+) submitted", run.stderr)
    job = httpx.get(f"{base_url}/v1/jobs/{job_id}").raise_for_status().json()
    assert job["config"]["search"]["time_budget_s"] == 60
    assert job["config"]["search"]["precisions"] == ["fp32"]
    report = job["search_report"]
    winner = report["winner"]

    lines = run.stdout.splitlines()
    # The server's headline: what the search shipped, not the config's precision (issue 45).
    assert lines[0] == f"job {job_id} succeeded: {job['outcome']['headline']}"
    header = next(at for at, line in enumerate(lines) if line.split()[:2] == ["candidate",
                                                                              "outcome"])
    rows = {m[1]: (m[2], line) for line in lines[header + 1:] if (m := _ROW.match(line))}
    assert set(rows) == {row["name"] for row in report["rows"]}
    if winner is None:  # ONNX Runtime fuses this convnet as well: no candidate beat the original
        assert lines[0].startswith(f"job {job_id} succeeded: Shipped your original model "
                                   "unchanged (search asked): no candidate beat the original")
        assert f"search (min_latency): the original won: {report['why']}" in lines
        assert "won" not in {outcome for outcome, _ in rows.values()}
        assert not any("pass it back to pin it" in line for line in lines)
        return
    # the winner's backend: the search races every CPU backend this worker runs
    backend = job["outcome"]["shipped"]["backend"]
    assert backend == report["recipe"].get("backend", job["config"]["backend"])
    assert lines[0].startswith(f"job {job_id} succeeded: Shipped the {backend} fp32 engine "
                               "(search asked")
    assert f"search (min_latency): {winner} won: {report['why']}" in lines
    assert rows[winner][0] == "won"
    won = next(row for row in report["rows"] if row["name"] == winner)
    timing = re.search(r"  ([\d.]+) \[([\d.]+)-([\d.]+)\]  +([\d.]+)x  +([\d.]+)",
                       rows[winner][1])
    assert timing, rows[winner][1]
    p50, low, high, speedup, cosine = (float(v) for v in timing.groups())
    assert [p50, low, high] == pytest.approx(
        [won["latency_ms_p50"], *won["latency_ms_p50_ci"]], rel=1e-3)
    assert speedup == pytest.approx(won["speedup"], abs=1e-3)
    assert cosine == pytest.approx(won["accuracy"]["cosine"], abs=1e-5)
    assert all(row["precision"] == "fp32" for row in report["rows"] if "precision" in row)
    # the recipe is stdout's last line, after its hint, so `| tail -1 > recipe.json` pins it
    assert "pass it back to pin it" in lines[-2]
    assert json.loads(lines[-1]) == report["recipe"]


def test_a_search_option_without_search_is_refused_naming_both_flags(convnet: str) -> None:
    # No server listens there: the refusal comes before any request.
    run = _submit(convnet, "--strategy", "max_throughput", url="http://127.0.0.1:9")

    assert run.returncode == 3
    assert run.stderr.count("\n") == 1, run.stderr
    assert "--strategy needs --search" in run.stderr and "drop --strategy" in run.stderr
    assert "could not reach" not in run.stderr


def test_search_with_precision_exits_3_with_the_servers_reason(base_url: str,
                                                               convnet: str) -> None:
    run = _submit(convnet, "--search", "--precision", "int8", "--wait", url=base_url)

    assert run.returncode == 3, run.stderr
    assert "precision: a search job tries this itself" in run.stderr
    assert "422" in run.stderr


def test_a_search_that_finds_nothing_exits_1_with_its_table_on_stderr(
        base_url: str, convnet: str, tmp_path: Path) -> None:
    # No engine runs in a nanosecond: every candidate is over the latency budget.
    run = _submit(convnet, "--search", "--strategy", "min_latency_under_budget",
                  "--latency-budget-ms", "0.000001", "--search-precisions", "fp32",
                  "--no-pass-sets", "--time-budget-s", "30", "--config",
                  _config(tmp_path, FAST), "--wait", url=base_url)

    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    assert "fuseforge submit: SearchFoundNothing: job " in run.stderr
    assert "search (min_latency_under_budget): no winner: " in run.stderr
    outcomes = [m[2] for line in run.stderr.splitlines() if (m := _ROW.match(line))]
    assert outcomes and set(outcomes) == {"over_latency_budget"}
