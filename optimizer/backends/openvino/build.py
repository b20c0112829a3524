"""Build an OpenVINO engine: the IR OpenVINO users deploy (engine.xml + engine.bin) plus its
manifest.

The IR is converted from the ONNX model the pipeline gives it (`ov.convert_model`) with its
inputs fixed at the job's shapes, ranged where the caller gives ranges, or left as the model
declares them; it is saved in fp32 (`compress_to_fp16=False`: OpenVINO would otherwise store the
weights in fp16, a precision the job did not ask for). The precision the engine computes at is
not in the IR: it is the CPU plugin's inference precision hint, which the manifest records and
`runner_for_engine` applies, as it does the job's threads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openvino as ov

from optimizer.backends.engine_manifest import MANIFEST_FILE, graph_stats, load_graph
from optimizer.backends.engine_manifest import engine_runner_options as read_options
from optimizer.backends.openvino.runner import (
    BACKEND,
    DEVICE,
    OpenVinoRunner,
    inference_precision_of,
)
from optimizer.errors import EngineBuildError, InputShapeError
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.registries.precisions import Precision

__all__ = [
    "ENGINE_FILE",
    "MANIFEST_FILE",
    "WEIGHTS_FILE",
    "OvBuildOptions",
    "OvEngine",
    "build_ov_engine",
    "engine_runner_options",
    "runner_for_engine",
]

ENGINE_FILE = "engine.xml"
WEIGHTS_FILE = "engine.bin"
MANIFEST_VERSION = 1

# (min, max) of each dim of an input whose dims are ranged; a max of None is unbounded.
DimRange = tuple[int, int | None]


@dataclass(frozen=True)
class OvBuildOptions:
    precision: Precision = Precision.FP32  # computed at through the inference precision hint
    threads: int | None = None  # INFERENCE_NUM_THREADS; None: OpenVINO's default (every core)


@dataclass(frozen=True)
class OvEngine:
    """A built engine: the IR's two files, and the manifest saying how to compile them."""

    model_path: Path  # engine.xml
    weights_path: Path  # engine.bin
    manifest_path: Path
    manifest: dict[str, Any]


def build_ov_engine(
    model_path: Path,
    out_dir: Path,
    *,
    options: OvBuildOptions,
    input_shapes: Mapping[str, Sequence[int]],
    keep_inputs_dynamic: bool = False,
    input_ranges: Mapping[str, Sequence[DimRange]] | None = None,
) -> OvEngine:
    """Convert `model_path` (ONNX) into `out_dir`/engine.xml + engine.bin at `input_shapes`.

    Inputs missing from `input_shapes` get the defaults of `resolve_input_shapes`. With
    `keep_inputs_dynamic` the IR keeps the model's own input dims and the shapes are only
    recorded; `input_ranges` bounds the dims of the inputs it names instead of fixing them.
    Writes `out_dir`/manifest.json (backend, versions, precision, threads, input shapes, op
    histograms) and checks that the engine compiles as the manifest says before returning.

    Raises:
        InvalidModelError, InputShapeError: the model or the shapes are unusable.
        EngineBuildError: OpenVINO cannot convert, save or compile the model.
    """
    model_path, out_dir = Path(model_path), Path(out_dir)
    inference_precision = inference_precision_of(options.precision)
    original = load_graph(model_path)
    shapes = resolve_input_shapes(summarize_model(original).inputs, input_shapes)
    ranges = dict(input_ranges or {})
    declared = _declared_inputs(keep_inputs_dynamic, shapes, ranges)
    try:
        converted = ov.convert_model(str(model_path),
                                     **({} if declared is None else {"input": declared}))
    except Exception as err:  # OpenVINO's frontends raise their own types
        raise EngineBuildError(
            f"OpenVINO could not convert model {model_path.name!r}"
            f"{'' if declared is None else ' at input shapes ' + _shown(shapes, ranges)}: "
            f"{err}") from err
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path, weights_path = out_dir / ENGINE_FILE, out_dir / WEIGHTS_FILE
    try:
        ov.save_model(converted, str(engine_path), compress_to_fp16=False)
    except Exception as err:
        raise EngineBuildError(
            f"OpenVINO could not save the IR of model {model_path.name!r}: {err}") from err
    if not (engine_path.is_file() and weights_path.is_file()):
        raise EngineBuildError(f"OpenVINO saved model {model_path.name!r} but wrote no "
                               f"{ENGINE_FILE} and {WEIGHTS_FILE} in {str(out_dir)!r}.")
    # Compiling once as the manifest says proves the engine works where it will be used, and
    # the compiled graph says what each layer really runs at.
    try:
        with OpenVinoRunner(engine_path, inference_precision=inference_precision,
                            threads=options.threads) as runner:
            runtime = _runtime_precisions(runner.compiled)
    except EngineBuildError as err:
        raise EngineBuildError(
            f"The engine built from model {model_path.name!r} does not compile for {DEVICE} "
            f"at inference precision {inference_precision!r}: {err}") from err
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "backend": str(BACKEND),
        "openvino_version": ov.get_version(),
        "device": DEVICE,
        "engine_file": ENGINE_FILE,
        "weights_file": WEIGHTS_FILE,
        "precision": str(options.precision),
        "inference_precision": inference_precision,
        "performance_hint": "LATENCY",
        "threads": options.threads,
        "input_shapes": {name: list(shape) for name, shape in shapes.items()},
        "input_ranges": {name: [list(dim) for dim in dims] for name, dims in ranges.items()},
        "inputs_left_dynamic": keep_inputs_dynamic,
        "source_model": graph_stats(original),
        "engine_model": _ir_stats(converted),
        # How many of the compiled graph's executed layers run at each precision ("bf16": 40,
        # "f32": 3): the hint is a preference; the plugin keeps some layers in f32.
        "runtime_precisions": runtime,
    }
    manifest_path = out_dir / MANIFEST_FILE
    _write_manifest(manifest_path, manifest)
    return OvEngine(model_path=engine_path, weights_path=weights_path,
                    manifest_path=manifest_path, manifest=manifest)


def runner_for_engine(engine_dir_or_manifest: Path, *, profiling: bool = False
                      ) -> OpenVinoRunner:
    """Compile a built engine as its manifest records (precision, threads).

    Accepts the engine's folder or its manifest.json.

    Raises:
        InternalError: the manifest is missing, unreadable or not an OpenVINO manifest.
        EngineBuildError: OpenVINO cannot compile the engine.
    """
    engine_file, options = engine_runner_options(engine_dir_or_manifest)
    return OpenVinoRunner(engine_file, profiling=profiling, **options)


def engine_runner_options(engine_dir_or_manifest: Path) -> tuple[Path, dict[str, Any]]:
    """The engine's IR file and the `OpenVinoRunner` options its manifest records.

    Raises:
        InternalError: as `runner_for_engine`.
    """
    return read_options(engine_dir_or_manifest, BACKEND, lambda manifest: {
        "inference_precision": manifest["inference_precision"],
        "threads": manifest.get("threads")})


def _declared_inputs(keep_inputs_dynamic: bool, shapes: Mapping[str, Sequence[int]],
                     ranges: Mapping[str, Sequence[DimRange]]
                     ) -> list[tuple[str, ov.PartialShape]] | None:
    """convert_model's `input`: each input's fixed or ranged shape; None keeps the model's own."""
    unknown = sorted(set(ranges) - set(shapes))
    if unknown:
        raise InputShapeError(f"Input ranges name {unknown}, which are not inputs of the model; "
                              f"its inputs are {sorted(shapes)}.", input_name=unknown[0])
    if keep_inputs_dynamic:
        return None
    declared = []
    for name, shape in shapes.items():
        dims = ranges.get(name)
        if dims is None:
            declared.append((name, ov.PartialShape(list(shape))))
            continue
        if len(dims) != len(shape):
            raise InputShapeError(
                f"Input {name!r} has {len(shape)} dims, but its range gives {len(dims)}.",
                input_name=name)
        declared.append((name, ov.PartialShape([
            ov.Dimension(low, -1 if high is None else high) for low, high in dims])))
    return declared


def _shown(shapes: Mapping[str, Sequence[int]], ranges: Mapping[str, Sequence[DimRange]]) -> str:
    return ", ".join(f"{name}={list(ranges.get(name, shape))}" for name, shape in shapes.items())


def _runtime_precisions(compiled: ov.CompiledModel) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("Input", "Output", "Const"):
            continue
        precision = info["runtimePrecision"].astype(str)
        counts[precision] = counts.get(precision, 0) + 1
    return dict(sorted(counts.items()))


def _ir_stats(model: ov.Model) -> dict[str, Any]:
    histogram: dict[str, int] = {}
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind not in ("Parameter", "Result", "Constant"):
            histogram[kind] = histogram.get(kind, 0) + 1
    return {"node_count": sum(histogram.values()), "op_histogram": dict(sorted(histogram.items()))}


def _write_manifest(path: Path, data: dict[str, Any]) -> None:
    """Write the manifest as JSON, then rename it into place: a reader never sees half of one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
