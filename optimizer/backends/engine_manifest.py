"""An engine folder's manifest.json: what every backend's builder writes beside its engine
(its backend, its engine file, the options its runner must be opened with), read back here.

Engines are FuseForge's own artifacts: a missing or malformed manifest is never the user's
fault, so both raise InternalError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from optimizer.errors import EngineBuildError, InternalError
from optimizer.model.graphs import op_histogram

__all__ = ["MANIFEST_FILE", "engine_runner_options", "graph_stats", "load_graph"]

MANIFEST_FILE = "manifest.json"


def engine_runner_options(engine_dir_or_manifest: Path, backend: str,
                          options: Callable[[Mapping[str, Any]], dict[str, Any]]
                          ) -> tuple[Path, dict[str, Any]]:
    """The engine's file and its runner's options, `options` read from the manifest of the
    engine folder (or manifest.json) `engine_dir_or_manifest`, which must be `backend`'s.

    Raises:
        InternalError: the manifest is missing, malformed or another backend's.
    """
    path = Path(engine_dir_or_manifest)
    manifest_path = path / MANIFEST_FILE if path.is_dir() else path
    try:
        manifest = json.loads(manifest_path.read_text())
        written_by = manifest["backend"]
        engine_file = manifest["engine_file"]
        runner_options = options(manifest)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InternalError(
            f"Engine manifest {str(manifest_path)!r} is missing or malformed: {err!r}") from err
    if written_by != backend:
        raise InternalError(f"Engine manifest {str(manifest_path)!r} is for backend "
                            f"{written_by!r}, not {str(backend)!r}.")
    return manifest_path.parent / engine_file, runner_options


def load_graph(path: Path) -> onnx.ModelProto:
    """The graph of the ONNX file an engine is built from, its weights left on disk (a
    manifest records the graph, not the weights).

    Raises:
        EngineBuildError: the file cannot be read as an ONNX model.
    """
    try:
        return onnx.load(path, format="protobuf", load_external_data=False)
    except (OSError, DecodeError) as err:
        raise EngineBuildError(f"Could not read model {str(path)!r}: {err}") from err


def graph_stats(model: onnx.ModelProto) -> dict[str, Any]:
    """A manifest's summary of a graph: its node count and op histogram."""
    histogram = op_histogram(model)
    return {"node_count": sum(histogram.values()), "op_histogram": histogram}
