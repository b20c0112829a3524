"""Keep ONNX Runtime's own log lines off a CLI command's stderr.

ONNX Runtime logs a failing kernel (e.g. a Gather index out of range) on stderr before it
raises; the command then says the same thing as its one line (fuseforge_cli/failures.py), so
the runtime's copy is shown only with --debug or FUSEFORGE_LOG_LEVEL=DEBUG.
"""

from __future__ import annotations

__all__ = ["quiet_onnxruntime"]

_FATAL_ONLY = 4  # ONNX Runtime severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal


def quiet_onnxruntime(*, debug: bool) -> None:
    """Log only fatal ONNX Runtime messages unless `debug`."""
    import onnxruntime

    if not debug:
        onnxruntime.set_default_logger_severity(_FATAL_ONLY)
