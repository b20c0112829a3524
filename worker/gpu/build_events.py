"""Carry an isolated engine build's progress and log from its child process to the job.

The build child (worker/gpu/engine_builds.py) has no database connection: it appends one JSON line
per event to a file (`BuildEventWriter`). The worker polls that file while it waits for the
child (`BuildEventRelay.poll`, the `keep_going` hook of `run_isolated`), and hands new lines to
a `Reporter` (the job's recorder) as job progress and job events:

- progress: the builder's fraction scaled into the stage's share of the job's progress, written
  at most every `progress_interval_s`;
- log lines at `event_severity` or above (warnings and errors by default) become job events,
  up to `max_events` of them (then one event says how many more the build log holds);
- every log line goes to the build log file, stored as an artifact next to the engine.

`poll` also answers whether the job still runs, so a cancel stops the build.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol, Self

from optimizer.backends.tensorrt import LogLine
from optimizer.backends.tensorrt.logger import SEVERITIES

__all__ = ["BuildEventRelay", "BuildEventWriter", "JobChannel", "Reporter"]

logger = logging.getLogger(__name__)

# (new job event messages, the job's progress or None) -> whether the job still runs
Reporter = Callable[[Sequence[str], float | None], bool]


class JobChannel(Protocol):
    """How GPU work talks to its job (the pipeline's JobRecorder): events and progress."""

    def reporter(self, stage: str) -> Reporter:
        """A `Reporter` writing events in `stage`, and progress (or else a heartbeat)."""
        ...

    def event(self, message: str, stage: str) -> None: ...


class BuildEventWriter:
    """The child's side: `progress` and `log` append a line each (flushed, so the parent sees
    it at once). Pass the bound methods as `build_trt_engine`'s `on_progress` and `on_log`."""

    def __init__(self, path: Path) -> None:
        self._file = Path(path).open("a", encoding="utf-8")

    def progress(self, fraction: float, phase: str) -> None:
        self._write({"kind": "progress", "fraction": float(fraction), "phase": phase})

    def log(self, line: LogLine) -> None:
        self._write({"kind": "log", **line.to_dict()})

    def _write(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class BuildEventRelay:
    """The worker's side, for one build; `report` (the job's `JobChannel.reporter`) writes to it.

    `progress_span` is the job progress at the build's start and end: the builder's fraction
    moves the job's progress linearly between them.
    """

    def __init__(
        self,
        events_path: Path,
        log_path: Path,
        *,
        report: Reporter,
        label: str,
        progress_span: tuple[float, float],
        event_severity: str = "WARNING",
        max_events: int = 50,
        progress_interval_s: float = 1.0,
        status_interval_s: float = 1.0,
    ) -> None:
        self._report = report
        self._events_path = Path(events_path)
        self._label = label  # e.g. "TensorRT build": prefixes the job events
        self._span = progress_span
        self._max_rank = SEVERITIES.index(event_severity)  # most severe first
        self._max_events = max_events
        self._progress_interval_s = progress_interval_s
        self._status_interval_s = status_interval_s
        self._log: IO[str] = Path(log_path).open("a", encoding="utf-8")
        self._offset = 0
        self._events_sent = 0
        self._events_withheld = 0
        self._fraction = 0.0
        self._fraction_sent = 0.0
        self._progress_at = 0.0
        self._status_at = time.monotonic()
        self._still_running = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def poll(self) -> bool:
        """Relay what the child wrote since the last poll; False once the job stopped running."""
        events = self._read_new_lines()
        messages = [message for event in events if (message := self._handle(event)) is not None]
        now = time.monotonic()
        progress_due = (self._fraction > self._fraction_sent
                        and now - self._progress_at >= self._progress_interval_s)
        status_due = now - self._status_at >= self._status_interval_s
        if messages or progress_due or status_due:
            self._write(messages, progress_due)
            self._status_at = now
            if progress_due:
                self._progress_at, self._fraction_sent = now, self._fraction
        return self._still_running

    def close(self) -> None:
        """Relay the last lines (the child has exited), note withheld events, close the log."""
        try:
            events = self._read_new_lines()
            messages = [m for event in events if (m := self._handle(event)) is not None]
            if self._events_withheld:
                messages.append(f"{self._label}: {self._events_withheld} more warning/error "
                                "line(s) are in the build log artifact")
            if messages or self._fraction > self._fraction_sent:
                self._write(messages, progress=True)
        except Exception:  # the build's own outcome matters more than its last log lines
            logger.exception("could not relay the last events of the %s", self._label)
        finally:
            self._log.close()

    def _read_new_lines(self) -> list[dict[str, Any]]:
        try:
            with self._events_path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []  # the child has not started writing yet
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        events = []
        for raw in complete.splitlines():
            try:
                events.append(json.loads(raw))
            except json.JSONDecodeError:
                logger.warning("%s: unreadable build event line %r", self._label, raw[:200])
        return events

    def _handle(self, event: dict[str, Any]) -> str | None:
        """Apply one event; the job event message it calls for, if any."""
        if event.get("kind") == "progress":
            self._fraction = max(self._fraction, min(float(event.get("fraction", 0.0)), 1.0))
            return None
        severity, message = str(event.get("severity", "INFO")), str(event.get("message", ""))
        self._log.write(f"[{severity}] {message}\n")
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)
        if rank > self._max_rank:
            return None
        if self._events_sent >= self._max_events:
            self._events_withheld += 1
            return None
        self._events_sent += 1
        return f"{self._label} {severity.lower()}: {message}"

    def _write(self, messages: list[str], progress: bool) -> None:
        start, end = self._span
        job_progress = start + (end - start) * self._fraction if progress else None
        self._still_running = self._report(messages, job_progress)
