"""Fixtures shared by the optimizer tests: tiny models on disk and a record of opened files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from optimizer.testing import models

# Audit hooks cannot be removed, so one hook is installed for the session and records only
# while a test's `opened_files` list is active.
_recording: list[list[str]] = []


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and _recording and isinstance(args[0], (str, bytes, Path)):
        _recording[-1].append(str(Path(args[0] if not isinstance(args[0], bytes)
                                       else args[0].decode()).resolve()))


sys.addaudithook(_record_open)


@pytest.fixture
def opened_files() -> Iterator[list[str]]:
    """Resolved paths of every file Python opens during the test."""
    paths: list[str] = []
    _recording.append(paths)
    yield paths
    _recording.remove(paths)


@pytest.fixture
def cnn_path(tmp_path: Path) -> Path:
    """small_cnn with a symbolic batch dim, saved as tmp_path/cnn.onnx."""
    path = tmp_path / "cnn.onnx"
    onnx.save(models.small_cnn(), path)
    return path


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(), path)
    return path
