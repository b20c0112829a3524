"""Stage `load`: check the model again and fix its input shapes to the job's static shapes."""

from dataclasses import replace

import onnx

from optimizer.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.tensor_specs import summarize_model
from worker.context import JobContext


def load_model(ctx: JobContext) -> None:
    model = onnx.load(ctx.model_path, format="protobuf")
    summary = summarize_model(model)
    shapes = resolve_input_shapes(summary.inputs, ctx.config.get("input_shapes"))
    static_model = fix_input_shapes(model, shapes)
    ctx.static_model_path = ctx.scratch_dir / "model.static.onnx"
    onnx.save(static_model, ctx.static_model_path)
    ctx.input_shapes = shapes
    ctx.input_specs = tuple(replace(spec, shape=shapes[spec.name]) for spec in summary.inputs)
