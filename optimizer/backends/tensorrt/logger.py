"""Collect TensorRT's log lines for the job's events and for error messages.

TensorRT calls `ILogger.log` from C++ for every message. An exception escaping that callback
cannot cross the C++ frames safely, so it never raises: a failing job callback is recorded in
`callback_error`, is not called again, and `build_trt_engine` re-raises it after the build.
`BuildLog` is plain Python; `trt_logger` wraps it in TensorRT's ILogger interface.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["SEVERITIES", "BuildLog", "LogLine", "trt_logger"]

# TensorRT's ILogger.Severity names, most severe first (INTERNAL_ERROR=0 ... VERBOSE=4 in both
# 10.x and 11.x; compared by name so nothing depends on the numbers).
SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class LogLine:
    severity: str  # one of SEVERITIES
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "message": self.message}


class BuildLog:
    """Collects log lines at `min_severity` or above, keeping the last `keep` of them.

    Each kept line also goes to `on_line` (e.g. to become a job event). Errors are kept apart
    in full (up to `keep`), so a build failure can quote them even after a flood of warnings.
    """

    def __init__(self, on_line: Callable[[LogLine], None] | None = None, *,
                 min_severity: str = "INFO", keep: int = 2000) -> None:
        if min_severity not in _RANK:
            raise ValueError(f"min_severity {min_severity!r} is not one of {SEVERITIES}.")
        self._on_line = on_line
        self._max_rank = _RANK[min_severity]
        self._lines: deque[LogLine] = deque(maxlen=keep)
        self._errors: deque[LogLine] = deque(maxlen=keep)
        self.dropped = 0  # lines below min_severity
        self.callback_error: BaseException | None = None

    def record(self, severity: str, message: str) -> None:
        """Take one line from TensorRT; never raises (see the module docstring)."""
        rank = _RANK.get(severity, _RANK["INFO"])
        if rank > self._max_rank:
            self.dropped += 1
            return
        line = LogLine(severity if severity in _RANK else "INFO", message)
        self._lines.append(line)
        if rank <= _RANK["ERROR"]:
            self._errors.append(line)
        if self._on_line is not None and self.callback_error is None:
            try:
                self._on_line(line)
            except Exception as err:  # must not reach TensorRT's C++ frames
                self.callback_error = err

    @property
    def lines(self) -> tuple[LogLine, ...]:
        return tuple(self._lines)

    @property
    def errors(self) -> tuple[LogLine, ...]:
        """The ERROR and INTERNAL_ERROR lines."""
        return tuple(self._errors)

    def error_text(self, limit: int = 10) -> str:
        """The last `limit` error lines, one per line, for an exception message; "" if none."""
        return "\n".join(line.message for line in tuple(self._errors)[-limit:])


def trt_logger(log: BuildLog) -> trt.ILogger:
    """A TensorRT logger that records into `log`. Needs the `tensorrt` package."""
    import tensorrt as trt

    # Without the stubs, mypy sees tensorrt as Any; the ignore covers that case only.
    class CollectingLogger(trt.ILogger):  # type: ignore[misc, unused-ignore]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # pybind11 needs the base initialised explicitly

        def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
            log.record(str(getattr(severity, "name", severity)), msg)

    return CollectingLogger()
