"""The README's shell blocks run as written: each block marked `<!-- readme-test -->` runs, in
the README's order, in one bash session (`set -eo pipefail`: any failing command fails it), in
a folder holding a `model.onnx` and the checkout's `.venv`, as a user's second shell beside
`fuseforge run` (what `make run` starts) with API keys on. Every block must end with exit 0,
every job it started must succeed, the engine it downloaded must be an ONNX model, and
`fuseforge run` must log no ERROR line for any of it (a start, jobs that succeed: expected
states, not errors).

The blocks not marked are synopses (placeholders, `[--options]`) and are not run.
"""

import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from sqlalchemy import create_engine, select

from core.db.models import Job
from optimizer.testing.models import small_cnn
from tests.support.processes import (
    FUSEFORGE,
    REPO_ROOT,
    Service,
    free_port,
    fuseforge_env,
    wait_healthy,
)

pytestmark = pytest.mark.e2e

README = REPO_ROOT / "README.md"
_MARKED_BLOCK = re.compile(r"<!-- readme-test -->\n```(?:sh|bash)\n(.*?)\n```", re.DOTALL)
_DONE = "readme-test: block {} done"
_ERROR_LINE = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ")  # core/logging_setup.py's text format


def readme_blocks() -> list[str]:
    return _MARKED_BLOCK.findall(README.read_text())


def test_the_readme_opens_with_its_two_set_up_commands() -> None:
    assert README.read_text().splitlines()[2:6] == [
        "```sh",
        "make run    # installs into .venv/, migrates, starts the API, a worker and the janitor "
        "on embedded defaults",
        "make test   # installs, starts PostgreSQL and Redis where they are not running, runs "
        "the whole suite",
        "```"]
    assert len(readme_blocks()) >= 3  # using it, following a job live, int8


def test_the_readme_blocks_run_as_written_against_fuseforge_run(tmp_path: Path) -> None:
    port = free_port()
    env = fuseforge_env(FUSEFORGE_DATA_DIR=str(tmp_path / "data"), FUSEFORGE_PORT=str(port),
                        FUSEFORGE_AUTH__ENABLED="true")
    service = Service([*FUSEFORGE, "run"], env, tmp_path / "run.log")
    shell = tmp_path / "shell"
    shell.mkdir()
    onnx.save(small_cnn(seed=45, batch=1), shell / "model.onnx")
    (shell / ".venv").symlink_to(Path(sys.prefix))  # the checkout's, as `make run` made it
    blocks = readme_blocks()
    script = "set -eo pipefail\n" + "".join(
        f"{block}\necho '{_DONE.format(number)}'\n" for number, block in enumerate(blocks, 1))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", service, timeout=180)
        run = subprocess.run(["bash", "-c", script], cwd=shell, env=env, capture_output=True,
                             text=True, timeout=900)
    finally:
        service.stop(timeout=60)

    done = [n for n in range(1, len(blocks) + 1) if _DONE.format(n) in run.stdout]
    failed = len(done) + 1
    assert run.returncode == 0, (
        f"README block {failed} of {len(blocks)} exited {run.returncode}:\n"
        f"{blocks[failed - 1] if failed <= len(blocks) else ''}\n--- stdout\n{run.stdout[-3000:]}"
        f"\n--- stderr\n{run.stderr[-3000:]}\n--- fuseforge run\n{service.output()[-3000:]}")
    assert done == list(range(1, len(blocks) + 1))
    engine = onnx.load(shell / "engine.onnx")  # an engine, not a 404's body
    assert engine.graph.node and [o.name for o in engine.graph.output] == ["logits"]
    database = create_engine(f"sqlite:///{tmp_path / 'data' / 'fuseforge.sqlite'}")
    try:
        with database.connect() as connection:
            jobs = connection.execute(select(Job.id, Job.status, Job.error_message)).all()
    finally:
        database.dispose()
    assert len(jobs) >= 3  # fp32, and int8 by curl and by fuseforge submit
    assert [job for job in jobs if job.status != "succeeded"] == []
    errors = [line for line in service.output().splitlines() if _ERROR_LINE.match(line)]
    assert errors == [], "\n".join(errors)
