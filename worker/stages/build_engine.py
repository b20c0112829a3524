"""Stage `build_engine`: build the backend's engine from the static-shape model."""

import shutil

from optimizer.backends.onnxruntime.build import OrtBuildOptions, build_ort_engine
from optimizer.errors import EngineBuildError, InternalError
from worker.capabilities import detect_worker_capabilities, refusal_for
from worker.context import JobContext


def build_engine(ctx: JobContext) -> None:
    if ctx.engine_source_path is None:
        raise InternalError("build_engine ran before optimize")
    if ctx.config["backend"] == "tensorrt":
        # The TensorRT build stage is not wired into the pipeline yet (issue 5 in progress):
        # say so plainly rather than pretend, whichever worker took the job.
        why = refusal_for(ctx.config, detect_worker_capabilities())
        raise EngineBuildError(
            why or "this FuseForge version cannot build TensorRT engines in the job pipeline "
            "yet; use backend 'onnxruntime' or 'fuseforge optimize --backend tensorrt'"
        )
    level = ctx.ort_level_override or ctx.config["ort_optimization_level"]
    options = OrtBuildOptions(optimization_level=level)  # type: ignore[arg-type]
    engine_dir = ctx.scratch_dir / "engine"
    shutil.rmtree(engine_dir, ignore_errors=True)  # a fallback rebuild replaces the engine
    engine_dir.mkdir()
    ctx.engine = build_ort_engine(
        ctx.engine_source_path, engine_dir, options=options, input_shapes=ctx.input_shapes
    )
    ctx.add_artifact("engine.onnx", "engine", ctx.engine.model_path)
    ctx.add_artifact("manifest.json", "manifest", ctx.engine.manifest_path)
