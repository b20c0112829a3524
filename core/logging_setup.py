"""One logging setup for every FuseForge process: the API, the worker, the janitor and each
job's own process, as text to read or as JSON lines for a log pipeline.

`FUSEFORGE_LOG_FORMAT=json` writes one object a line:

    {"ts": "2026-12-01T22:19:11.123Z", "level": "INFO", "logger": "worker.pipeline.run",
     "message": "job 3f2a... failed: ...", "job_id": "3f2a...", "process": "job"}

with `request_id` on every line logged while the API handles a request (api/http/request_ids.py
sets it) and `job_id` on every line logged while a job runs (the worker's task and the job's
own process set it), and an exception's traceback as `exc_info`. Text lines carry the same
ids at their end. The ids live in context variables, so a line logged by any library inside a
request or a job gets them without passing them along.
"""

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, Literal

__all__ = [
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "configure_logging",
    "job_context",
    "job_id_var",
    "request_id_var",
]

LogFormat = Literal["text", "json"]

request_id_var: ContextVar[str | None] = ContextVar("fuseforge_request_id", default=None)
job_id_var: ContextVar[str | None] = ContextVar("fuseforge_job_id", default=None)

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "request_id", "job_id", "process_role", "taskName", "role", "ids",
    "color_message"}  # uvicorn's copy of the message with terminal colours


@contextmanager
def job_context(job_id: object) -> Iterator[None]:
    """Lines logged inside the block carry `job_id` (a job's task, or its own process)."""
    token = job_id_var.set(str(job_id))
    try:
        yield
    finally:
        job_id_var.reset(token)


class _ContextIds(logging.Filter):
    """Copies the request and job ids of the current context onto each record (on the handler,
    so records of every logger pass through it)."""

    def __init__(self, role: str | None) -> None:
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.job_id = job_id_var.get()
        record.process_role = self.role
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, the ids, `extra=` fields, exc_info."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _utc_iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "job_id"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        role = getattr(record, "process_role", None)
        if role:
            entry["process"] = role
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        # default=str: an `extra=` value JSON cannot hold is logged as its text, not dropped.
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`2026-12-01 22:19:11,123 INFO [worker] name: message [job=... request=...]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(role)s%(name)s: %(message)s%(ids)s")

    def format(self, record: logging.LogRecord) -> str:
        role = getattr(record, "process_role", None)
        record.role = f"[{role}] " if role else ""
        ids = [f"{label}={value}" for label, value in (
            ("job", getattr(record, "job_id", None)),
            ("request", getattr(record, "request_id", None))) if value]
        record.ids = f" [{' '.join(ids)}]" if ids else ""
        return super().format(record)


def _utc_iso(created: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{whole}.{int(created % 1 * 1000):03d}Z"


class _FuseForgeHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler this module installed, so configuring again replaces it."""


def configure_logging(log_format: LogFormat, *, level: int | str = logging.INFO,
                      role: str | None = None, stream: IO[str] | None = None) -> None:
    """Send every logger's records (through the root logger) to `stream` (default: stderr) in
    `log_format`; `role` ("api", "worker", "janitor", "job") names the process on each line.

    Idempotent: a second call replaces the handler the first installed, and a plain
    `logging.basicConfig` handler goes too (each line once); handlers others added (pytest's
    capture) stay.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers
                    if isinstance(h, _FuseForgeHandler) or type(h) is logging.StreamHandler]:
        root.removeHandler(handler)
    handler = _FuseForgeHandler(stream or sys.stderr)
    handler.addFilter(_ContextIds(role))
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # a library's warning is a log line too, not raw stderr
