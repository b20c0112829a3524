"""The model a job (or `fuseforge optimize --input-shape`) runs: every input fixed at a concrete
shape, refused up front when the shapes do not fit.

Dynamic dims nobody gave a size for default to 1 (`resolve_input_shapes`). Many models cannot
run there: a strided convnet declared [N, 3, H, W] has no room for its kernels at 1x1, or its
outputs come out empty. Rather than fail deep inside a later stage, `static_model` runs the
model once when a non-batch dynamic dim is at 1 and, when that fails but the model runs with
those dims at 224, refuses with an `InputShapeError` naming the dynamic dims and the input
shapes to send.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from optimizer.errors import InputShapeError, UnsupportedModelError
from optimizer.model.input_ranges import infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.model_writer import run_problem

__all__ = ["StaticModel", "static_model"]

# The size a defaulted non-batch dim is probed at to tell "too small" from "broken": the usual
# image side, and a sequence length any position table covers.
_PROBE_DIM = 224


@dataclass(frozen=True)
class StaticModel:
    """`model` with every input fixed at `shapes` (input name -> dims). Write it with
    `model_writer.save_model`, which checks that ONNX Runtime loads and runs it."""

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, ...]]


def static_model(model: onnx.ModelProto, requested: Mapping[str, Sequence[int]] | None, *,
                 data_folder: Path | None = None) -> StaticModel:
    """Fix `model`'s inputs at `requested` (other dynamic dims at 1), first refusing sizes the
    model cannot run at (`data_folder`: where its external data files are, to run it).

    Raises:
        InputShapeError: as `resolve_input_shapes`; or non-batch dynamic dims at 1 are too
            small for the model (it fails or gives an empty output there but runs with them at
            224), naming them and the `input_shapes` to send.
        InvalidModelError: ONNX shape inference fails for these shapes.
    """
    inputs = summarize_model(model).inputs
    shapes = resolve_input_shapes(inputs, requested)
    # Axis 0 is a batch dim in nearly every model, where 1 is always right. (A job's shapes
    # reach the worker resolved, so a 1 there may be a default or a request: either way the
    # model cannot run at it.)
    at_one = [(spec, axis) for spec in inputs for axis, dim in enumerate(spec.shape)
              if axis > 0 and not isinstance(dim, int) and shapes[spec.name][axis] == 1]
    if at_one:
        _refuse_too_small(model, inputs, shapes, at_one, data_folder)
    fixed = fix_input_shapes(model, shapes)
    return StaticModel(model=fixed, shapes=shapes)


def _refuse_too_small(
    model: onnx.ModelProto, inputs: Sequence[TensorSpec], shapes: dict[str, tuple[int, ...]],
    at_one: list[tuple[TensorSpec, int]], data_folder: Path | None,
) -> None:
    problem = _run_problem(model, inputs, shapes, data_folder)
    if problem is None:
        return
    probe = {name: list(dims) for name, dims in shapes.items()}
    for spec, axis in at_one:
        probe[spec.name][axis] = _PROBE_DIM
    probe_shapes = {name: tuple(dims) for name, dims in probe.items()}
    if _run_problem(model, inputs, probe_shapes, data_folder) is not None:
        return  # not a matter of size: later checks and stages report it
    dims = ", ".join(f"{spec.name!r} axis {axis} ({spec.shape[axis] or 'unnamed'})"
                     for spec, axis in at_one)
    names = {spec.name for spec, _ in at_one}
    suggested = {spec.name: list(probe_shapes[spec.name]) for spec in inputs if spec.name in names}
    flags = " ".join(f"--input-shape {name}={','.join(map(str, dims))}"
                     for name, dims in suggested.items())
    raise InputShapeError(
        f"The model's dynamic dims {dims} are at 1 (the size a dynamic dim takes when no input "
        f"shape gives one), and the model cannot run at input shapes {_shown(shapes)}: "
        f"{problem}. Give the sizes to run at, e.g. input_shapes: {json.dumps(suggested)} in "
        f"the job, or {flags} on the command line.", input_name=at_one[0][0].name)


def _run_problem(model: onnx.ModelProto, inputs: Sequence[TensorSpec],
                 shapes: Mapping[str, tuple[int, ...]], data_folder: Path | None) -> str | None:
    # Why the (dynamic) model cannot run at `shapes`, or None when it runs with no empty output.
    specs = [TensorSpec(spec.name, spec.dtype, shapes[spec.name]) for spec in inputs]
    try:
        feeds = random_feeds(specs, count=1, seed=0, ranges=infer_input_ranges(model))[0]
    except UnsupportedModelError:
        return None  # no data to try it with: later stages say so
    return run_problem(model, feeds, data_folder=data_folder)


def _shown(shapes: Mapping[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{name}={list(dims)}" for name, dims in shapes.items())
