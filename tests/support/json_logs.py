"""This process's log lines as JSON (core/logging_setup.py), captured for a test."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from core.logging_setup import configure_logging

__all__ = ["captured_json_log"]


@contextmanager
def captured_json_log(role: str) -> Iterator[io.StringIO]:
    """The root logger writes JSON lines of process `role` into the yielded stream; the
    logging setup before is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("json", role=role, stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
