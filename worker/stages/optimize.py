"""Stage `optimize`: run the job's fusion passes on the static-shape model."""

import json

import onnx

from optimizer.errors import InternalError
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import AccuracyBudget, convert_precision, search_precision
from worker.context import JobContext
from worker.feeds import job_feeds

_SEARCH_SAMPLES = 4  # each search step runs the model on these; validation then uses them all


def optimize_graph(ctx: JobContext) -> None:
    if ctx.static_model_path is None:
        raise InternalError("optimize ran before load")
    model = onnx.load(ctx.profiled_model_path or ctx.static_model_path)
    options = OptimizeOptions(
        backend=ctx.config["backend"],
        passes=ctx.passes_override or ctx.config["passes"],
        excluded_rules=ctx.excluded_rules,
    )
    fused, report = optimize_model(model, options)
    ctx.fusion_report = report
    ctx.fused_model_path = ctx.scratch_dir / "fused.onnx"
    onnx.save(fused, ctx.fused_model_path)
    report_path = ctx.scratch_dir / "fusion_report.json"
    report_path.write_text(json.dumps(report.to_dict(), indent=2))
    ctx.add_artifact("fused.onnx", "optimized_model", ctx.fused_model_path)
    ctx.add_artifact("fusion_report.json", "report", report_path)
    ctx.engine_source_path = ctx.fused_model_path
    if ctx.config["precision"] != "fp32":
        _convert_precision(ctx, fused)


def _convert_precision(ctx: JobContext, fused: onnx.ModelProto) -> None:
    """The low-precision graph TensorRT 11 needs (it builds strongly typed networks); with
    `precision_search`, the fewest extra fp32 nodes that keep it within the accuracy budget."""
    if ctx.config.get("precision_search"):
        feeds, _ = job_feeds(ctx)
        result = search_precision(
            fused, feeds[:_SEARCH_SAMPLES], precision=ctx.config["precision"],
            budget=AccuracyBudget(**ctx.config["accuracy_budget"]),
        )
        ctx.accuracy["precision_search"] = result.to_dict()
        converted, report = result.model, result.report
    else:
        converted, report = convert_precision(fused, ctx.config["precision"])
    ctx.accuracy["precision"] = report.to_dict()
    ctx.engine_source_path = ctx.scratch_dir / f"model.{ctx.config['precision']}.onnx"
    onnx.save(converted, ctx.engine_source_path)
    ctx.add_artifact(ctx.engine_source_path.name, "optimized_model", ctx.engine_source_path)
