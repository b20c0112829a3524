"""What `fuseforge submit` shows on stderr while it works: an upload bar, a line per stage."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from fuseforge_client import Job

__all__ = ["JobProgressLines", "UploadBar"]

_MB = 1024 * 1024
_WIDTH = 30


class UploadBar:
    """`upload NAME [#####-----]  42%  12.0/28.5 MB`, redrawn in place on a terminal; where
    stderr is a file or a CI log, one line at every 25 % instead of a stream of redraws."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self._name = name
        self._stream = stream or sys.stderr
        self._live = self._stream.isatty()
        self._shown = -1

    def update(self, sent: int, total: int) -> None:
        percent = 100 if total <= 0 else min(100, sent * 100 // total)
        step = 1 if self._live else 25
        if percent // step == self._shown // step and self._shown >= 0:
            return
        self._shown = percent
        filled = _WIDTH * percent // 100
        line = (f"upload {self._name} [{'#' * filled}{'-' * (_WIDTH - filled)}] {percent:3d}%  "
                f"{_size(sent)}/{_size(total)}")
        self._stream.write(f"\r{line}" if self._live else f"{line}\n")
        self._stream.flush()

    def __enter__(self) -> UploadBar:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live and self._shown >= 0:
            self._stream.write("\n")  # leave the bar, end its line
            self._stream.flush()


def _size(n: int) -> str:
    return f"{n / _MB:.1f} MB" if n >= _MB else f"{n / 1024:.1f} KB"


class JobProgressLines:
    """A `wait` progress callback that says one line when the job's status changes and one per
    stage it enters: `job 1f0c... running (5%)`, `  stage optimize (20%)`. Polling can miss a
    short stage, so stages are also read from the job's events ("stage <name> ...")."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._status: str | None = None
        self._stages: set[str] = set()

    def __call__(self, job: Job) -> None:
        lines = []
        for stage in [*_entered_stages(job), job.stage]:
            if stage and stage not in self._stages and stage != "done":
                self._stages.add(stage)
                now = f" ({job.progress:.0%})" if stage == job.stage else ""
                lines.append(f"  stage {stage}{now}")
        if job.status != self._status:
            self._status = job.status
            detail = job.data.get("status_detail")
            waiting = f": {detail}" if job.status == "queued" and detail else ""
            status = f"job {job.id} {job.status} ({job.progress:.0%}){waiting}"
            # The stages a finished job went through come before its end.
            lines = [*lines, status] if job.finished else [status, *lines]
        for line in lines:
            self._say(line)


def _entered_stages(job: Job) -> list[str]:
    return [str(event["stage"]) for event in job.data.get("events") or ()
            if event.get("stage") and str(event.get("message", "")).startswith("stage ")]
