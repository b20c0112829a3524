"""`fuseforge submit --wait --fail-on-regression` against a real API server: a job whose engine
the server flags as slower than the model's best earlier one exits 5 and prints the figures;
without the flag, or when the engine is not slower, it exits 0.

No worker runs the jobs: this test plays the worker's last step, finishing each job through
`JobRecorder.succeed` (where regressions are judged) with an engine timing of its choosing, so
the flagged figures are known."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import Job, JobStatus
from optimizer.testing.models import small_cnn
from tests.support.api_server import ApiServer, running_api, server_database
from tests.support.broker import TEST_REDIS_URL
from tests.support.finished_jobs import ORIGINAL_P50, finish_with_engine_timing

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_api(tmp_path_factory.mktemp("regression"), broker_url=TEST_REDIS_URL) as server:
        yield server


@pytest.fixture(scope="module")
def database(api: ApiServer) -> Iterator[Engine]:
    with server_database(api) as engine:
        yield engine


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "cnn.onnx"
    onnx.save(small_cnn(seed=uuid.uuid4().int % 1000), path)
    return str(path)


def _submit_and_finish(api: ApiServer, database: Engine, cnn: str, *flags: str,
                       engine_p50: float, engine_ci: tuple[float, float],
                       original_p50: float = ORIGINAL_P50) -> subprocess.CompletedProcess[str]:
    """Run `fuseforge submit --wait` and, once its job is queued, finish it with an engine
    record of `engine_p50` (`engine_ci`) as a worker would."""
    sessions = sessionmaker(database)
    with sessions() as session:
        before = set(session.scalars(select(Job.id)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL=api.base_url)
    cli = subprocess.Popen([sys.executable, "-m", "fuseforge_cli.main", "submit", cnn, "--wait",
                            "--timeout", "120", *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           cwd=REPO)
    try:
        finish_with_engine_timing(sessions, _new_job(sessions, before), engine_p50, engine_ci,
                                  original_p50=original_p50)
        stdout, stderr = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    return subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr)


def _new_job(sessions: sessionmaker[Session], before: set[uuid.UUID]) -> uuid.UUID:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with sessions() as session:
            queued = set(session.scalars(select(Job.id).where(
                Job.status == JobStatus.QUEUED.value))) - before
        if queued:
            [job_id] = queued
            return job_id
        time.sleep(0.1)
    raise AssertionError("fuseforge submit created no job within 60 s")


def test_a_regression_exits_5_with_its_figures_only_when_asked(api: ApiServer, database: Engine,
                                                               cnn: str) -> None:
    first = _submit_and_finish(api, database, cnn, "--fail-on-regression",
                               engine_p50=2.4, engine_ci=(2.35, 2.46))
    assert first.returncode == 0, first.stderr  # nothing earlier to be slower than
    assert "regression" not in first.stderr.lower()
    first_id = first.stdout.split()[1]

    slower = _submit_and_finish(api, database, cnn, "--fail-on-regression",
                                engine_p50=3.1, engine_ci=(2.98, 3.22))
    assert slower.returncode == 5, slower.stderr
    [line] = [ln for ln in slower.stderr.splitlines() if "Regression" in ln]
    assert line.startswith("fuseforge submit: Regression: job ")
    assert line.endswith(f"engine 1.61× the original's speed (1.55–1.68) vs 2.08× (2.03–2.13) "
                         f"in job {first_id}, each against the original timed in its own run: "
                         f"1.29× slower")
    assert "succeeded" in slower.stdout  # the verdict is still printed

    unflagged = _submit_and_finish(api, database, cnn, engine_p50=3.1, engine_ci=(2.98, 3.22))
    assert unflagged.returncode == 0, unflagged.stderr
    assert "regression: engine 1.61× the original's speed" in unflagged.stderr

    # a busier host: original and engine both twice as slow as the first job's, the same
    # speed-up over the original timed beside it: no regression
    busier = _submit_and_finish(api, database, cnn, "--fail-on-regression", engine_p50=4.8,
                                engine_ci=(4.7, 4.9), original_p50=2 * ORIGINAL_P50)
    assert busier.returncode == 0, busier.stderr
    assert "regression" not in busier.stderr.lower()

    faster = _submit_and_finish(api, database, cnn, "--fail-on-regression",
                                engine_p50=2.0, engine_ci=(1.95, 2.05))
    assert faster.returncode == 0, faster.stderr


def test_fail_on_regression_needs_wait(cnn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL="http://127.0.0.1:9")
    run = subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "submit", cnn,
                          "--fail-on-regression"], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=60)
    assert run.returncode == 3 and "--fail-on-regression needs --wait" in run.stderr
