"""Move a running job from stage to stage, and tell the supervisor which stage runs.

The job's process records each stage in the database (the job's `stage` and progress) and in a
small file the supervisor (worker/supervision/supervisor.py) reads to hold the stage to its limits
without asking the database: `StageMark` says which stage runs, since when (the monotonic clock,
shared by every process on the host), and whether it is waiting for the GPU (time the supervisor
does not count against the stage).
"""

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.stage_memory import PeakMemory
from worker.pipeline.stages import SEARCH, ProgressSpan, span_of

__all__ = ["JobStopped", "StageMark", "StageProgress", "read_stage_mark"]


class JobStopped(Exception):
    """The job was cancelled or swept while it ran: the run stops and records nothing more."""


@dataclass(frozen=True)
class StageMark:
    stage: str
    since: float  # time.monotonic() when the stage started, or last stopped waiting
    waiting: bool = False  # waiting for the GPU: not counted against the stage's limits


def read_stage_mark(path: Path) -> StageMark | None:
    """The stage the job's process last marked; None before its first stage (or if unreadable)."""
    try:
        return StageMark(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


class StageProgress:
    def __init__(self, recorder: JobRecorder, stage_file: Path | None = None) -> None:
        self._recorder = recorder
        self._stage_file = stage_file
        self._reached = 0.0
        self._stage: str | None = None
        self._search = False  # the job runs the search stage: its spans (stages.span_of)
        self.memory = PeakMemory()  # each stage's peak resident memory

    def enter(self, stage: str, note: str | None = None) -> ProgressSpan:
        """Record that the job entered `stage`; the span of progress it may fill.

        The job's progress never goes back: a fallback round that re-enters `optimize` after
        `validate` keeps the progress already reached (its events say which round it is).

        Raises:
            JobStopped: the job was cancelled (or swept) meanwhile.
        """
        self._search = self._search or stage == SEARCH
        return self.enter_part(stage, span_of(stage, search=self._search), note)

    def enter_part(self, stage: str, span: ProgressSpan, note: str | None = None) -> ProgressSpan:
        """As `enter`, for a piece of `stage` that fills `span` of the job's progress (a search
        candidate's build, its share of the search).

        Raises:
            JobStopped: the job was cancelled (or swept) meanwhile.
        """
        progress = max(span.start, self._reached)
        if not self._recorder.start_stage(stage, progress, note):
            raise JobStopped
        self._reached = progress
        self._stage = stage
        self.memory.enter(stage)
        self._mark(waiting=False)
        return ProgressSpan(progress, max(span.end, progress))

    def report(self, messages: list[str], progress: float) -> bool:
        """Record `messages` as events of the current stage and move the job's progress to
        `progress` (never back), in one transaction; False if the job no longer runs."""
        self._reached = max(self._reached, progress)
        return self._recorder.reporter(self._stage or "")(messages, self._reached)

    def note(self, message: str) -> None:
        """Record `message` as an event of the current stage (something skipped, and why)."""
        self._recorder.event(message, self._stage or "")

    def waiting(self, waiting: bool) -> None:
        """The stage waits for (True) or got (False) the GPU; its clock restarts once it has it."""
        self._mark(waiting=waiting)

    def _mark(self, *, waiting: bool) -> None:
        if self._stage_file is None or self._stage is None:
            return
        mark = StageMark(stage=self._stage, since=time.monotonic(), waiting=waiting)
        partial = self._stage_file.with_name(self._stage_file.name + ".partial")
        partial.write_text(json.dumps(asdict(mark)))
        os.replace(partial, self._stage_file)  # the reader sees the old mark or the new one
