"""Package the user's model, unchanged, as an ONNX Runtime engine: what ships when no engine
beats it (every attempt failed validation, or the benchmark measured the engine slower).

The engine folder holds the model's own bytes as engine.onnx and a manifest that loads it at
ONNX Runtime's default level ("all", nothing disabled, denormals as they come): exactly what
its user ran before, so deploying it changes nothing. A model whose weights are in data files
keeps its bytes except for where the weights live: they are copied, byte for byte and in
chunks, into one engine.onnx.data beside engine.onnx (the name every engine's data file has),
and the graph's tensors point there.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from optimizer.backends.onnxruntime.build import (
    ENGINE_DATA_FILE,
    ENGINE_FILE,
    MANIFEST_FILE,
    OrtEngine,
    manifest_head,
    write_manifest,
)
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import EngineBuildError
from optimizer.model.external_data import external_tensors
from optimizer.model.file import write_model_file
from optimizer.model.graphs import op_histogram
from optimizer.registries.ort_levels import DEFAULT_ORT_LEVEL

__all__ = ["original_as_engine"]


def original_as_engine(model_path: Path, out_dir: Path, *, intra_op_threads: int | None,
                       input_shapes: Mapping[str, Sequence[int]]) -> OrtEngine:
    """Write `model_path` unchanged into `out_dir` as engine.onnx (and engine.onnx.data when its
    weights are external, read from its folder), with a manifest loading it at ONNX Runtime's
    default level; `input_shapes` are recorded (the model keeps its own input dims).

    Raises:
        EngineBuildError: the model cannot be read, or ONNX Runtime cannot load the copy.
    """
    model_path, out_dir = Path(model_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path, data_path = out_dir / ENGINE_FILE, out_dir / ENGINE_DATA_FILE
    data_path.unlink(missing_ok=True)
    try:
        model = onnx.load(model_path, format="protobuf", load_external_data=False)
    except (OSError, DecodeError) as err:
        raise EngineBuildError(f"Could not read model {str(model_path)!r}: {err}") from err
    external = any(external_tensors(model))
    if external:
        write_model_file(model, engine_path, data_location=ENGINE_DATA_FILE,
                         data_folder=model_path.parent)
    else:
        shutil.copyfile(model_path, engine_path)
    try:
        OnnxRuntimeRunner(engine_path, optimization_level=DEFAULT_ORT_LEVEL,
                          intra_op_threads=intra_op_threads).close()
    except EngineBuildError as err:
        raise EngineBuildError(f"The original model {model_path.name!r} does not load at ONNX "
                               f"Runtime's default level: {err}") from err
    histogram = op_histogram(model)
    stats = {"node_count": sum(histogram.values()), "op_histogram": histogram}
    manifest = {
        **manifest_head(external=external),
        "original": True,  # the user's model unchanged: nothing beat it
        "requested_optimization_level": DEFAULT_ORT_LEVEL,
        "saved_optimization_level": None,  # not optimized offline: saved as uploaded
        "load_optimization_level": DEFAULT_ORT_LEVEL,
        "intra_op_threads": intra_op_threads,
        "flush_denormals": False,
        "flush_denormals_why": "the original runs as its user ran it",
        "disabled_optimizers": {},
        "input_shapes": {name: list(shape) for name, shape in input_shapes.items()},
        "inputs_left_dynamic": True,
        "source_model": stats,
        "engine_model": stats,
    }
    manifest_path = out_dir / MANIFEST_FILE
    write_manifest(manifest_path, manifest)
    return OrtEngine(model_path=engine_path, manifest_path=manifest_path, manifest=manifest,
                     data_path=data_path if external else None)
