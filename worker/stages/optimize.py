"""Stage `optimize`: run the job's fusion passes on the static-shape model."""

import json

import onnx

from optimizer.errors import InternalError
from optimizer.optimize import OptimizeOptions, optimize_model
from worker.context import JobContext


def optimize_graph(ctx: JobContext) -> None:
    if ctx.static_model_path is None:
        raise InternalError("optimize ran before load")
    model = onnx.load(ctx.static_model_path)
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
