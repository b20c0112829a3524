"""Write a model FuseForge made only after ONNX Runtime has loaded it and run it once.

Every model FuseForge writes (the CLI's output, a job's static reference and its optimized
graph) goes through `save_model`, so a file that ONNX Runtime cannot load is refused with the
runtime's reason instead of being written and found broken later, e.g. a recurrent model whose
input shapes were fixed: with static shapes ONNX Runtime's load-time constant folding inlines
the rank checks in a Loop body that never runs and type-checks its LSTM ("First input tensor
must have rank 3"). (In an If branch, optimizer/model/dead_branches.py prevents that.)

The check loads at the ONNX Runtime optimization level the file will be run at (default
"all", ONNX Runtime's own default: what a user of the file gets) and, when every input shape is
concrete, runs the model once on the given inputs or seeded random ones. With
integer inputs, a run failure is blamed on the model only when `reference` (the model it was
made from) runs on the same inputs: random integers outside what the model accepts (token ids
past a vocabulary) are not this model's fault and are left to validation, which takes the
job's input ranges.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.backends.onnxruntime.run_limits import RunLimit, model_has_loop
from optimizer.backends.onnxruntime.runner import OptimizationLevel, session_options
from optimizer.errors import (
    InferenceError,
    InferenceTimeLimitError,
    InternalError,
    UnsupportedModelError,
)
from optimizer.model.file import write_model_file
from optimizer.model.input_ranges import infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import ModelSummary, TensorSpec, summarize_model
from optimizer.plugins.decompose import runnable_in_onnxruntime

__all__ = ["check_model_runs", "data_file_name", "run_problem", "save_model"]

# FATAL only: a failure comes back as an exception, so ONNX Runtime need not print it too.
_QUIET = 4


def save_model(model: onnx.ModelProto, path: Path, *, what: str,
               reference: onnx.ModelProto | None = None,
               optimization_level: OptimizationLevel = "all",
               feeds: Mapping[str, np.ndarray] | None = None,
               data_location: str | None = None, data_folder: Path | None = None) -> None:
    """Check `model` as `check_model_runs` does, then write it to `path` (one protobuf, as it
    is: nothing is written when the check fails). With `data_location` (a file name), its
    tensors' bytes go into that file beside `path` (optimizer/model/file.py): the data file
    takes its place first, then the model file. `data_folder` is where `model`'s (and
    `reference`'s) tensors stored as external data are read from.

    Raises:
        UnsupportedModelError, InferenceError: as `check_model_runs`.
        InternalError: `data_location` is not a plain file name.
    """
    # Serialized once and written beside `path` first: ONNX Runtime loads the file there (twice
    # as fast as from bytes, and no second 100 MB serialization for a ResNet-50), and it takes
    # `path`'s place only once it loads and runs. Written a tensor at a time
    # (optimizer/model/file.py), never held whole in memory; the bytes as they are: onnx.save
    # would first walk every tensor looking for external data. A model with a data file is
    # checked in a hidden folder of its own: its tensors name the data file's final name.
    if data_location is None:
        checking = path.with_name(f".{path.name}.{os.getpid()}.checking")
        written = [(checking, path)]
    else:
        if Path(data_location).name != data_location or data_location in (path.name, ".."):
            raise InternalError(f"A data file is named beside its model, not {data_location!r}.")
        folder = path.with_name(f".{path.name}.{os.getpid()}.checking")
        folder.mkdir(exist_ok=True)
        checking = folder / path.name
        written = [(folder / data_location, path.with_name(data_location)), (checking, path)]
    try:
        write_model_file(model, checking, data_location=data_location, data_folder=data_folder)
        check_model_runs(model, what=what, reference=reference,
                         optimization_level=optimization_level, feeds=feeds, written=checking,
                         data_folder=data_folder)
        for temporary, final in written:
            os.replace(temporary, final)
    finally:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)
        if data_location is not None:
            checking.parent.rmdir()


def data_file_name(path: Path, summary: ModelSummary) -> str | None:
    """The data file a model written to `path` keeps its tensors in: "<name>.data" when the
    model it came from (`summary`) had external data, else None (one file)."""
    return f"{Path(path).name}.data" if summary.external_data is not None else None


def check_model_runs(model: onnx.ModelProto, *, what: str,
                     reference: onnx.ModelProto | None = None,
                     optimization_level: OptimizationLevel = "all",
                     feeds: Mapping[str, np.ndarray] | None = None,
                     written: Path | None = None, data_folder: Path | None = None) -> None:
    """Load `model` in ONNX Runtime (fuseforge plugin nodes decomposed; from `written`, a file
    holding it, when given and it has none) at `optimization_level` and, when its input
    shapes are concrete, run it once on `feeds` (a job's first validation sample), else on
    seeded random inputs. `what` names the model in messages ("the optimized model
    'out.onnx'"); `data_folder` holds the files its external tensors (and `reference`'s) name.

    The level matters: at "all" (ONNX Runtime's default, what a user of a written file gets)
    load-time constant folding inlines `If` branches and type-checks them with the folded
    shapes, which "disabled" does not.

    Raises:
        UnsupportedModelError: ONNX Runtime cannot load the model (its message included).
        InferenceError: the run fails (with integer inputs: and `reference`, when given, runs
            on the same inputs).
        InferenceTimeLimitError: a model with a Loop runs past its first-run limit.
    """
    inputs = summarize_model(model).inputs
    runnable = runnable_in_onnxruntime(model)
    session = _session(written if written is not None and runnable is model else runnable,
                       f"{what} (input shapes {_shapes(inputs)}, ONNX Runtime optimization "
                       f"level {optimization_level!r})", optimization_level, data_folder)
    if not all(_concrete(spec) for spec in inputs):
        return  # dynamic dims: no size is known to be right; loading is the check
    if feeds is None:
        try:
            feeds = random_feeds(inputs, count=1, seed=0, ranges=infer_input_ranges(model))[0]
        except UnsupportedModelError:
            return  # an input FuseForge cannot make data for (strings): loading is the check
    feeds = dict(feeds)
    try:
        _run(session, feeds, model, what)
    except InferenceTimeLimitError:
        raise
    except Exception as err:  # noqa: BLE001 - ORT raises its own unrelated exception types
        # Random floats suit any float input, so with only those a failed run is the model's
        # fault; random integers may not (token ids past a vocabulary), so then the run counts
        # only when the reference passes it.
        if (reference is not None and any(_integral(spec) for spec in inputs)
                and run_problem(reference, feeds, data_folder=data_folder) is not None):
            return
        raise InferenceError(
            f"ONNX Runtime loads {what} but cannot run it at input shapes "
            f"{_shapes(inputs)}: {_first_line(err)}. FuseForge does not write a model that "
            "fails to run: check that the model accepts these input shapes; for an optimized "
            "model, see whether a rewrite is the cause by running fewer passes (passes: "
            "none).") from err


def run_problem(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
                data_folder: Path | None = None) -> str | None:
    """Why ONNX Runtime cannot load `model` (its external data in `data_folder`) or run it on
    `feeds` (its first message line), or why the run is useless (an output comes out empty);
    None when it runs."""
    try:
        session = _session(runnable_in_onnxruntime(model), "the model", "disabled", data_folder)
        outputs = _run(session, feeds, model, "the model")
    except Exception as err:  # noqa: BLE001 - any failure is an answer here
        return _first_line(err)
    for output, value in zip(session.get_outputs(), outputs, strict=True):
        if getattr(value, "size", 1) == 0:
            return f"output {output.name!r} comes out empty (shape {list(value.shape)})"
    return None


def _session(model: onnx.ModelProto | Path, what: str, optimization_level: OptimizationLevel,
             data_folder: Path | None = None) -> ort.InferenceSession:
    options = session_options(optimization_level, None)
    options.log_severity_level = _QUIET
    if data_folder is not None and not isinstance(model, Path):
        # A model from bytes has no folder to find its data files in (from a file: its own).
        options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                         str(data_folder))
    # Prepacking lays weights out for the CPU kernels (a ResNet-50: 0.1 s of a 0.25 s load):
    # kernel preparation, not graph checking, and this session runs at most once.
    options.add_session_config_entry("session.disable_prepacking", "1")
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    try:
        return ort.InferenceSession(source, sess_options=options,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - ORT raises its own unrelated exception types
        unoptimized = "" if optimization_level == "disabled" else (
            ", or let ONNX Runtime leave the graph as it is (a job's ort_optimization_level "
            "'disabled')")
        raise UnsupportedModelError(
            f"ONNX Runtime cannot load {what}: {_first_line(err)}. FuseForge does not write a "
            "model that fails to load. If its input shapes were fixed, the model may hold "
            "control flow (If, Loop) whose unused branches only type-check at other shapes, "
            "which ONNX Runtime's graph optimizations check once the shapes are static: give "
            "shapes every branch accepts, leave the inputs dynamic (fuseforge optimize without "
            f"--input-shape){unoptimized}.") from err


def _run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray],
         model: onnx.ModelProto, what: str) -> list[Any]:
    # A first run: a model with a Loop gets its first-run limit (backends/onnxruntime/run_limits).
    if model_has_loop(model):
        return RunLimit().run(session, None, feeds, log_severity_level=_QUIET, what=what)
    options = ort.RunOptions()
    options.log_severity_level = _QUIET
    outputs: list[Any] = session.run(None, dict(feeds), options)
    return outputs


def _integral(spec: TensorSpec) -> bool:
    return spec.dtype.startswith(("int", "uint", "bool"))


def _concrete(spec: TensorSpec) -> bool:
    return all(isinstance(dim, int) for dim in spec.shape)


def _shapes(inputs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(f"{spec.name}={_dims(spec)}" for spec in inputs)


def _dims(spec: TensorSpec) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in spec.shape) + "]"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
