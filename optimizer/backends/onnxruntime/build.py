"""Build a portable ONNX Runtime engine: an offline-optimized model file plus its manifest.

ONNX Runtime's "all" level adds layout transforms (NCHWc Conv, ReorderInput/Output in the
com.microsoft.nchwc domain) chosen for the building CPU's vector width; a model saved with them
"should only be used in the same environment the model was optimized in" (ORT's own warning),
and a worker on another CPU may fail to load it or run it slowly. So when "all" is requested the
engine is saved at "extended", which holds only portable fusions, and the manifest says to load
it at "all": ONNX Runtime then redoes the layout transforms for the CPU it actually runs on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from optimizer.backends.engine_manifest import MANIFEST_FILE, graph_stats, load_graph
from optimizer.backends.engine_manifest import engine_runner_options as read_options
from optimizer.backends.onnxruntime.denormals import flushing_supported
from optimizer.backends.onnxruntime.runner import (
    BACKEND,
    PROVIDERS,
    OnnxRuntimeRunner,
    OptimizationLevel,
    session_options,
)
from optimizer.errors import EngineBuildError, InternalError
from optimizer.model.data_file import MIN_EXTERNAL_BYTES
from optimizer.model.external_data import external_tensors
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model

__all__ = [
    "ENGINE_DATA_FILE",
    "ENGINE_FILE",
    "SLOWER_ORT_FUSIONS",
    "MANIFEST_FILE",
    "MEASURED_ON_ORT",
    "OrtBuildOptions",
    "OrtEngine",
    "build_ort_engine",
    "engine_session_options",
    "manifest_head",
    "runner_for_engine",
    "write_manifest",
]

ENGINE_FILE = "engine.onnx"
ENGINE_DATA_FILE = "engine.onnx.data"  # an engine's weights, when its source kept them external
MANIFEST_VERSION = 1
# The level an engine is saved at, for each requested level; see the module docstring.
_SAVED_LEVEL: dict[str, OptimizationLevel] = {
    "disabled": "disabled", "basic": "basic", "extended": "extended", "all": "extended"}


# The ONNX Runtime release the measured decisions below (and the passes' off-by-default ones)
# were taken on; pyproject.toml pins it, and a test fails when the installed one differs.
MEASURED_ON_ORT = "1.32"

# ONNX Runtime fusions FuseForge keeps out of its engines, each with the measurement that
# decided it (a fused kernel is not always faster; see the brief's "every fusion is measured").
SLOWER_ORT_FUSIONS: dict[str, str] = {
    "SkipLayerNormFusion": (
        f"ORT {MEASURED_ON_ORT}'s CPU SkipLayerNormalization kernel ran at 0.15-0.44x the "
        "speed of Add + "
        "LayerNormalization (bench/fuse_norm_gelu.py, hidden 128-768, seq 128); without this "
        "fusion a BERT encoder exported by torch's dynamo exporter ran 1.14-1.17x faster at "
        "level all (bench/fusion.py)"
    ),
}


@dataclass(frozen=True)
class OrtBuildOptions:
    optimization_level: OptimizationLevel = "all"
    intra_op_threads: int | None = None
    # ONNX Runtime's own optimizer names (e.g. "SkipLayerNormFusion") to keep off, at build
    # time and every time the engine loads.
    disabled_optimizers: tuple[str, ...] = tuple(SLOWER_ORT_FUSIONS)
    # Denormals flushed to zero while the engine runs (denormals.py: masked attention rows
    # otherwise run on denormal operands at a fraction of the speed). None: when the engine
    # softmaxes masked scores, where denormals come from; elsewhere the switch costs a few
    # microseconds a run (2-4% of a millisecond model, bench.real_corpus) for nothing.
    flush_denormals: bool | None = None


@dataclass(frozen=True)
class OrtEngine:
    """A built engine: the optimized model, and the manifest saying how to load it."""

    model_path: Path
    manifest_path: Path
    manifest: dict[str, Any]
    # its weights' file beside it (engine.onnx.data), when the source kept them external
    data_path: Path | None = None


def build_ort_engine(
    model_path: Path,
    out_dir: Path,
    *,
    options: OrtBuildOptions,
    input_shapes: Mapping[str, Sequence[int]],
    keep_inputs_dynamic: bool = False,
) -> OrtEngine:
    """Optimize `model_path` for the given input shapes into `out_dir`/engine.onnx.

    Inputs missing from `input_shapes` get the defaults of `resolve_input_shapes`. With
    `keep_inputs_dynamic` the engine keeps the model's own input dims (for a model ONNX
    Runtime cannot optimize with fixed ones) and the shapes are only recorded. Writes
    `out_dir`/manifest.json (backend, versions, levels, input shapes, op histograms) and
    checks that the engine loads at its load level before returning.

    Raises:
        InvalidModelError, InputShapeError: the model or the shapes are unusable.
        EngineBuildError: ONNX Runtime cannot optimize, save or reload the model.
    """
    model_path, out_dir = Path(model_path), Path(out_dir)
    requested = options.optimization_level
    if requested not in _SAVED_LEVEL:
        raise InternalError(f"Unknown ONNX Runtime optimization level {requested!r}; expected "
                            f"one of {', '.join(_SAVED_LEVEL)}.")
    original = load_graph(model_path)
    shapes = resolve_input_shapes(summarize_model(original).inputs, input_shapes)
    static = original if keep_inputs_dynamic else fix_input_shapes(original, shapes)
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path = out_dir / ENGINE_FILE
    saved_level = _SAVED_LEVEL[requested]
    # A source whose weights are in data files (a model over 2 GB) gets an engine whose
    # weights are too: ONNX Runtime reads them from the source's folder and writes its own.
    external = any(external_tensors(original))
    save_optimized_model(static, engine_path, level=saved_level,
                         intra_op_threads=options.intra_op_threads, source_name=model_path.name,
                         disabled_optimizers=options.disabled_optimizers,
                         data_folder=model_path.parent if external else None)
    # Loading once at the load level proves the engine works where it will be used.
    try:
        OnnxRuntimeRunner(engine_path, optimization_level=requested,
                          intra_op_threads=options.intra_op_threads,
                          disabled_optimizers=options.disabled_optimizers).close()
    except EngineBuildError as err:
        raise EngineBuildError(
            f"The engine built from model {model_path.name!r} does not load at level "
            f"{requested!r}: {err}") from err
    engine_model = load_graph(engine_path)
    engine_stats = graph_stats(engine_model)
    flush, why_flush = _flush_denormals(options.flush_denormals, engine_model)
    manifest = {
        **manifest_head(external=external),
        "requested_optimization_level": requested,
        "saved_optimization_level": saved_level,
        "load_optimization_level": requested,
        "intra_op_threads": options.intra_op_threads,
        # Honoured where the platform allows it (flush_denormals_supported: this build's).
        "flush_denormals": flush,
        "flush_denormals_why": why_flush,
        "flush_denormals_supported": flushing_supported(),
        "disabled_optimizers": {
            name: SLOWER_ORT_FUSIONS.get(name, "disabled by the job") for name in options.disabled_optimizers
        },
        "input_shapes": {name: list(shape) for name, shape in shapes.items()},
        "inputs_left_dynamic": keep_inputs_dynamic,
        "source_model": graph_stats(original),
        "engine_model": engine_stats,
    }
    manifest_path = out_dir / MANIFEST_FILE
    write_manifest(manifest_path, manifest)
    return OrtEngine(model_path=engine_path, manifest_path=manifest_path, manifest=manifest,
                     data_path=out_dir / ENGINE_DATA_FILE if external else None)


# Attention ops and the inputs that mask their scores (after query/key/value or the packed
# weights): a masked score is where a denormal comes from.
_MASKED_ATTENTION_INPUTS = {
    "Attention": range(3, 6),  # mask_index, past, attention_bias
    "MultiHeadAttention": range(4, 6),  # key_padding_mask, attention_bias
    "GroupQueryAttention": range(3, 12),
    "PackedAttention": range(3, 6),
    "PackedMultiHeadAttention": range(3, 6),
}
_MASKING_OPS = frozenset({"Add", "Sub", "Where", "Mul"})  # scores + mask, select, scale after


def _flush_denormals(requested: bool | None, engine: onnx.ModelProto) -> tuple[bool, str]:
    """Whether the engine flushes denormals, and why (for the manifest)."""
    if requested is not None:
        return requested, "requested (the job's ort_flush_denormals)"
    masked = _masked_softmax(engine.graph)
    if masked is not None:
        return True, (f"{masked} applies a mask before its softmax: masked scores make "
                      "denormals there, several times slower to compute with")
    return False, ("no masked softmax in the engine: flushing would cost a few microseconds a "
                   "run for nothing")


def _masked_softmax(graph: onnx.GraphProto) -> str | None:
    """The first node that softmaxes masked scores: an attention op given a mask, or a Softmax
    of an Add/Sub/Where/Mul result; None when there is none."""
    producers = {output: node for node in graph.node for output in node.output}
    for node in graph.node:
        label = node.name or node.op_type
        positions = _MASKED_ATTENTION_INPUTS.get(node.op_type)
        if node.domain == "com.microsoft" and positions is not None:
            if any(i < len(node.input) and node.input[i] for i in positions):
                return f"{node.op_type} {label!r}"
        elif node.op_type in ("Softmax", "LogSoftmax") and node.domain in ("", "ai.onnx"):
            feeding = producers.get(node.input[0])
            if feeding is not None and feeding.op_type in _MASKING_OPS:
                return f"Softmax {label!r}"
    return None


def save_optimized_model(model: onnx.ModelProto, engine_path: Path, *, level: OptimizationLevel,
                         intra_op_threads: int | None, source_name: str,
                         disabled_optimizers: Sequence[str] = (),
                         data_folder: Path | None = None) -> Path:
    """Let ONNX Runtime optimize `model` at `level` and write the result to `engine_path`.
    `data_folder`: where `model`'s external data files are; the result's weights then go into
    ENGINE_DATA_FILE beside `engine_path` (a protobuf cannot hold over 2 GB).

    Raises:
        EngineBuildError: ONNX Runtime fails, or writes no file.
    """
    options = session_options(level, intra_op_threads)
    options.optimized_model_filepath = str(engine_path)
    engine_path.unlink(missing_ok=True)
    if data_folder is not None:
        engine_path.with_name(ENGINE_DATA_FILE).unlink(missing_ok=True)
        for key, value in (
                ("session.model_external_initializers_file_folder_path", str(data_folder)),
                ("session.optimized_model_external_initializers_file_name", ENGINE_DATA_FILE),
                ("session.optimized_model_external_initializers_min_size_in_bytes",
                 str(MIN_EXTERNAL_BYTES))):
            options.add_session_config_entry(key, value)
    try:
        ort.InferenceSession(model.SerializeToString(), sess_options=options,
                             providers=list(PROVIDERS),
                             disabled_optimizers=list(disabled_optimizers))
    # ONNX Runtime's errors share no base class below Exception.
    except Exception as err:
        raise EngineBuildError(
            f"ONNX Runtime could not optimize model {source_name!r} at level {level!r}: {err}"
        ) from err
    if not engine_path.is_file():
        raise EngineBuildError(
            f"ONNX Runtime optimized model {source_name!r} at level {level!r} but wrote no "
            f"file at {str(engine_path)!r}.")
    return engine_path


def runner_for_engine(engine_dir_or_manifest: Path) -> OnnxRuntimeRunner:
    """Load a built engine at the optimization level its manifest records.

    Accepts the engine's folder or its manifest.json.

    Raises:
        InternalError: the manifest is missing, unreadable or not an ONNX Runtime manifest
            (engines are our own artifacts, so this is never the user's fault).
        EngineBuildError: ONNX Runtime cannot load the engine.
    """
    engine_file, options = engine_session_options(engine_dir_or_manifest)
    return OnnxRuntimeRunner(engine_file, **options)


def engine_session_options(engine_dir_or_manifest: Path) -> tuple[Path, dict[str, Any]]:
    """The engine's model file and the `OnnxRuntimeRunner` options its manifest records
    (optimization_level, intra_op_threads, disabled_optimizers, flush_denormals).

    Raises:
        InternalError: as `runner_for_engine`.
    """
    return read_options(engine_dir_or_manifest, BACKEND, lambda manifest: {
        "optimization_level": manifest["load_optimization_level"],
        "intra_op_threads": manifest.get("intra_op_threads"),
        "disabled_optimizers": list(manifest.get("disabled_optimizers", {})),
        "flush_denormals": bool(manifest.get("flush_denormals", False))})


def manifest_head(*, external: bool) -> dict[str, Any]:
    """The fields every engine manifest opens with: format, runtime, engine file names."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "backend": BACKEND,
        "onnxruntime_version": ort.__version__,
        "providers": list(PROVIDERS),
        "engine_file": ENGINE_FILE,
        "engine_data_file": ENGINE_DATA_FILE if external else None,
    }


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    """Write a manifest as JSON, then rename it into place: a reader never sees half of one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
