"""Stage `build_engine`: build the backend's engine from the optimized model.

onnxruntime: an ORT-optimized model and its manifest (optimizer/backends/onnxruntime/).
tensorrt: a TensorRT engine built in an isolated child on this worker's GPU
(worker/tensorrt_build.py), with its metadata, the engine inspector's report and the build log
as artifacts, and the report's summary kept for the job next to the fusion report.
"""

import shutil
from pathlib import Path

from optimizer.backends.onnxruntime.build import OrtBuildOptions, build_ort_engine
from optimizer.backends.tensorrt import ENGINE_FILE, METADATA_FILE, REPORT_FILE
from optimizer.errors import InternalError
from worker.context import JobContext
from worker.tensorrt_build import build_job_engine, build_log_path

__all__ = ["build_engine"]

_STAGE_PROGRESS = (0.2, 0.4)  # from this stage's start to the next one's (worker/stages)


def build_engine(ctx: JobContext) -> None:
    if ctx.engine_source_path is None:
        raise InternalError("build_engine ran before optimize")
    engine_dir = ctx.scratch_dir / "engine"
    shutil.rmtree(engine_dir, ignore_errors=True)  # a fallback rebuild replaces the engine
    if ctx.config["backend"] == "tensorrt":
        _build_tensorrt(ctx, ctx.engine_source_path, engine_dir)
        return
    level = ctx.ort_level_override or ctx.config["ort_optimization_level"]
    options = OrtBuildOptions(optimization_level=level)  # type: ignore[arg-type]
    engine_dir.mkdir()
    ctx.engine = build_ort_engine(
        ctx.engine_source_path, engine_dir, options=options, input_shapes=ctx.input_shapes
    )
    ctx.add_artifact("engine.onnx", "engine", ctx.engine.model_path)
    ctx.add_artifact("manifest.json", "manifest", ctx.engine.manifest_path)


def _build_tensorrt(ctx: JobContext, source: Path, engine_dir: Path) -> None:
    engine = build_job_engine(ctx, source, engine_dir, label="TensorRT build",
                              stage="build_engine", progress_span=_STAGE_PROGRESS)
    ctx.engine = engine
    ctx.engine_report = {"metadata": engine.metadata.to_dict(), "layers": engine.report}
    ctx.add_artifact(ENGINE_FILE, "engine", engine.engine_path)
    ctx.add_artifact(METADATA_FILE, "manifest", engine.metadata_path)
    ctx.add_artifact(REPORT_FILE, "report", engine.report_path)
    log_path = build_log_path(engine_dir)
    if log_path.is_file():
        ctx.add_artifact("build.log", "log", log_path)
