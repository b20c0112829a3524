"""The TensorRT engine of the unfused model: the reference a tensorrt job's engine is timed
against, so the benchmark shows what our fusions add to TensorRT's own, at the same precision
on the same GPU (timing a GPU engine against ONNX Runtime on the CPU would say nothing about
fusion)."""

import shutil

from optimizer.backends.tensorrt import TrtEngine
from optimizer.errors import InternalError
from worker.context import JobContext
from worker.tensorrt_build import build_job_engine, model_at_job_precision

__all__ = ["build_reference_engine"]


def build_reference_engine(ctx: JobContext, progress_span: tuple[float, float]) -> TrtEngine:
    """Build the job's model without our passes (converted to the job's precision the same way
    when it is not fp32) into scratch/reference-engine; its metadata joins the engine report."""
    source = ctx.profiled_model_path or ctx.static_model_path
    if source is None:
        raise InternalError("the reference engine was asked for before load")
    source = model_at_job_precision(ctx, source)
    out_dir = ctx.scratch_dir / "reference-engine"
    shutil.rmtree(out_dir, ignore_errors=True)
    engine = build_job_engine(ctx, source, out_dir, label="TensorRT build of the unfused model",
                              stage="benchmark", progress_span=progress_span)
    if ctx.engine_report is not None:
        ctx.engine_report["reference_engine"] = engine.metadata.to_dict()
    return engine
