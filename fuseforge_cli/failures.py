"""How `fuseforge optimize` and `fuseforge validate` end when they cannot do their job: one line
on stderr (what, why, what to do), a documented exit code, and with --json one JSON object on
stdout as well, so a script reading stdout always gets an answer.

Exit codes (shared with `fuseforge submit`, issue 12):
    0  done: the model was written, the candidate passed
    1  the model could not be handled: refused (not an ONNX model, unsupported, over a limit),
       a pass failed, ONNX Runtime could not run it, or a fault of FuseForge's own
    2  validation failed: the candidate's outputs differ from the original's beyond tolerance
    3  bad usage: a malformed option, a missing or unreadable file, a shape, range, tolerance or
       dataset that does not fit the model
    4  (fuseforge submit) the server is unreachable, unavailable, or refused the API key
    5  (fuseforge submit --fail-on-regression) the job succeeded, but its engine was flagged:
       its speed-up over the original (timed in the same run) fell below the model's best
       earlier one of the same shipped configuration and environment
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from core.invalid_settings import InvalidSettings
from optimizer.errors import (
    DatasetError,
    InputRangeError,
    InputShapeError,
    InternalError,
    OptimizerError,
)

__all__ = [
    "EXIT_CODES_HELP",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "EXIT_VALIDATION_FAILED",
    "CliFailure",
    "failure_from",
    "readable_file",
    "report_failure",
    "warn",
]

EXIT_OK, EXIT_FAILED, EXIT_VALIDATION_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_REGRESSION = 5
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended

EXIT_CODES_HELP = """exit codes:
  0  done: the model was written (optimize), the candidate passed (validate), the job
     succeeded (submit, jobs wait)
  1  the model could not be handled: refused, a pass failed, ONNX Runtime could not run it;
     submit, jobs wait: the job failed or was cancelled
  2  validate, submit, jobs wait: the candidate's outputs differ from the original's beyond tolerance
  3  bad usage: a malformed option, a missing or unreadable file, a shape, range, tolerance
     or dataset that does not fit the model; submit: a bad job config (or the server's 422);
     any command: a FUSEFORGE_* setting's value is refused
  4  submit: the server is unreachable or unavailable, or refused the API key
  5  submit --fail-on-regression: the job succeeded, but its engine's speed-up over the
     original (timed in the same run) is below the model's best earlier one of the same
     shipped configuration and environment (beyond both intervals)
Errors are one line on stderr; with --json, stdout also holds {"error", "detail", "exit_code"}.
Set FUSEFORGE_LOG_LEVEL=DEBUG or pass --debug to see the traceback."""

# The model or the arguments given for it: the user fixes the command line.
_USAGE_ERRORS = (InputShapeError, InputRangeError, DatasetError)


@dataclass(frozen=True)
class CliFailure(Exception):
    """A command that cannot go on: `error` names the kind (e.g. "FileNotFound"), `detail`
    says what, why and what to do."""

    error: str
    detail: str
    exit_code: int

    def __str__(self) -> str:
        return self.detail


def failure_from(err: BaseException) -> CliFailure:
    """The failure an exception raised by a command stands for (module docstring's codes)."""
    if isinstance(err, CliFailure):
        return err
    if isinstance(err, InvalidSettings):
        return CliFailure("InvalidSettings", str(err), EXIT_USAGE)
    if isinstance(err, FileNotFoundError):
        return CliFailure("FileNotFound", f"{err.filename or err}: no such file; check the path.",
                          EXIT_USAGE)
    if isinstance(err, (IsADirectoryError, PermissionError)):
        why = "is a directory" if isinstance(err, IsADirectoryError) else "permission denied"
        return CliFailure("FileUnreadable", f"{err.filename or err}: {why}; give a readable "
                          ".onnx file.", EXIT_USAGE)
    if isinstance(err, _USAGE_ERRORS):
        return CliFailure(type(err).__name__, str(err), EXIT_USAGE)
    if isinstance(err, OptimizerError):
        return CliFailure(type(err).__name__, str(err), EXIT_FAILED)
    if isinstance(err, ValueError):
        return CliFailure("InvalidArgument", str(err), EXIT_USAGE)
    if isinstance(err, OSError):
        return CliFailure("FileError", f"{err}; check the path and its permissions.", EXIT_USAGE)
    if isinstance(err, InternalError):
        detail = str(err)
    else:
        detail = f"{type(err).__name__}: {err}"
    return CliFailure("InternalError", f"{detail} (a bug in FuseForge: rerun with --debug and "
                      "report the traceback).", EXIT_FAILED)


def report_failure(command: str, failure: CliFailure, *, json_output: bool) -> int:
    """Say `failure` as one line on stderr (and a JSON object on stdout with --json); its code."""
    detail = " ".join(failure.detail.split())  # runtime messages span lines; ours is one
    prog = f"fuseforge {command}" if command else "fuseforge"
    print(f"{prog}: {failure.error}: {detail}", file=sys.stderr)
    if json_output:
        print(json.dumps({"error": failure.error, "detail": detail,
                          "exit_code": failure.exit_code}))
    return failure.exit_code


def warn(command: str, message: str) -> None:
    """A problem that does not end the command (e.g. localisation failed), as one line."""
    print(f"fuseforge {command}: {' '.join(message.split())}", file=sys.stderr)


def readable_file(path: Path, what: str = "model") -> Path:
    """`path`, once it is known to be a file this process can read.

    Raises:
        CliFailure: FileNotFound (exit 3) or FileUnreadable (exit 3), saying what to do.
    """
    if not path.exists():
        raise CliFailure("FileNotFound", f"{what} file {str(path)!r} does not exist; check the "
                         "path.", EXIT_USAGE)
    if not path.is_file():
        raise CliFailure("FileUnreadable", f"{what} file {str(path)!r} is not a regular file "
                         "(a directory?); give the .onnx file itself.", EXIT_USAGE)
    try:
        with path.open("rb"):
            pass
    except OSError as err:
        raise CliFailure("FileUnreadable", f"{what} file {str(path)!r} cannot be read "
                         f"({err.strerror or err}); check its permissions.", EXIT_USAGE) from err
    return path
