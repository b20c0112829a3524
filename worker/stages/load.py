"""Stage `load`: check the model again and fix its input shapes to the job's static shapes.

Every job gets model.static.onnx, all inputs fixed at the job's `input_shapes`: the reference
that validation, benchmarks and bisection run. A job with optimization profiles (TensorRT only)
also gets model.profiled.onnx, which the engine is fused and built from: every axis a profile
lets vary (min != max) is left dynamic, every other axis fixed to its profile's size.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import onnx

from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec, resolve_profiles
from optimizer.shapes import fix_input_shapes, fix_input_shapes_except, resolve_input_shapes
from optimizer.tensor_specs import TensorSpec, summarize_model
from worker.context import JobContext

__all__ = ["load_model"]

STATIC_MODEL_FILE = "model.static.onnx"
PROFILED_MODEL_FILE = "model.profiled.onnx"


def load_model(ctx: JobContext) -> None:
    """Write the static model (and the profiled one when the job has profiles) to scratch.

    Raises:
        InputShapeError: the job's input shapes or profiles do not fit the model (the API
            checked them, so only a model changed since would do this).
        InvalidModelError: ONNX shape inference fails for these shapes.
    """
    model = onnx.load(ctx.model_path, format="protobuf")
    summary = summarize_model(model)
    shapes = resolve_input_shapes(summary.inputs, ctx.config.get("input_shapes"))
    static_model = fix_input_shapes(model, shapes)
    ctx.static_model_path = ctx.scratch_dir / STATIC_MODEL_FILE
    onnx.save(static_model, ctx.static_model_path)
    ctx.input_shapes = shapes
    ctx.input_specs = tuple(replace(spec, shape=shapes[spec.name]) for spec in summary.inputs)
    profiles = ctx.config.get("profiles")
    if profiles:
        profiled_model = _profiled_model(model, summary.inputs, shapes, profiles)
        ctx.profiled_model_path = ctx.scratch_dir / PROFILED_MODEL_FILE
        onnx.save(profiled_model, ctx.profiled_model_path)


def _profiled_model(
    model: onnx.ModelProto,
    inputs: tuple[TensorSpec, ...],
    shapes: Mapping[str, tuple[int, ...]],
    profiles: Mapping[str, Any],
) -> onnx.ModelProto:
    # Inputs without a profile get a static one at their shape, so they are fixed like the
    # rest; an axis whose profile has min == max is fixed at that size (the shape lies within
    # the profile, so `shapes` holds it).
    resolved = resolve_profiles(inputs, profiles, input_shapes=shapes)
    return fix_input_shapes_except(model, shapes, {
        name: _varying_axes(profile) for name, profile in resolved.items()})


def _varying_axes(profile: OptimizationProfileSpec) -> list[int]:
    return [axis for axis, (low, high) in enumerate(zip(profile.min, profile.max, strict=True))
            if low != high]
