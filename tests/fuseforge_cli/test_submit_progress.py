"""What `fuseforge submit` shows while it works, and that the CLI loads no HTTP client until a
command needs one."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

from fuseforge_cli.submit_progress import JobProgressLines, UploadBar
from fuseforge_client import Job


def _job(status: str, stage: str | None, progress: float, *stages: str) -> Job:
    events = [{"stage": s, "message": f"stage {s} started", "created_at": "2026-01-01T00:00:00"}
              for s in stages]
    data: dict[str, Any] = {"id": "j1", "model_id": "m1", "status": status, "stage": stage,
                            "progress": progress, "error": None, "artifacts": [],
                            "events": events}
    return Job.from_json(data)


def test_upload_bar_in_a_log_writes_a_line_per_quarter() -> None:
    log = io.StringIO()  # not a terminal: no carriage-return redraws
    bar = UploadBar("big.onnx", log)
    for sent in range(0, 101, 5):
        bar.update(sent * 1024 * 1024, 100 * 1024 * 1024)
    lines = log.getvalue().splitlines()
    assert [line.split("]")[1].split("%")[0].strip() for line in lines] == [
        "0", "25", "50", "75", "100"]
    assert lines[-1].endswith("100.0 MB/100.0 MB")


def test_job_lines_say_each_status_and_every_stage_once_even_when_polls_miss_some() -> None:
    said: list[str] = []
    lines = JobProgressLines(said.append)
    lines(_job("queued", None, 0.0))
    lines(_job("running", "optimize", 0.2, "load", "optimize"))  # the poll missed "load"
    lines(_job("running", "optimize", 0.3, "load", "optimize"))  # progress only: nothing new
    lines(_job("succeeded", "done", 1.0, "load", "optimize", "validate"))
    assert said == ["job j1 queued (0%)", "job j1 running (20%)", "  stage load",
                    "  stage optimize (20%)", "  stage validate", "job j1 succeeded (100%)"]


def test_the_cli_starts_without_importing_httpx_or_the_client() -> None:
    script = ("import sys; from fuseforge_cli.main import _parser; _parser(None); "
              "print(sorted(m for m in ('httpx', 'fuseforge_client') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
