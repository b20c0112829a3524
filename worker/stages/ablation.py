"""Stage `ablation` (when the job asks for it): benchmark the fusion stages cumulatively.

onnxruntime: each stage's model in ONNX Runtime with its own optimizations off.
tensorrt: a TensorRT engine of each stage's model (at the job's precision) on this worker's GPU,
so the table shows what each fusion family adds on top of TensorRT's own fusions.
"""

from contextlib import AbstractContextManager
from pathlib import Path

import onnx

from optimizer.ablation import RunnerFor, onnxruntime_stage_runner, run_ablation
from optimizer.errors import InternalError
from optimizer.runner import Runner
from worker.context import JobContext
from worker.engine_runners import open_engine_runner
from worker.stages.benchmark import batch_size_of, benchmark_setup
from worker.tensorrt_build import build_job_engine, model_at_job_precision

__all__ = ["benchmark_ablation"]

_BUILD_PROGRESS = (0.75, 0.9)


def benchmark_ablation(ctx: JobContext) -> None:
    source = ctx.profiled_model_path or ctx.static_model_path
    if source is None:
        raise InternalError("ablation ran before load")
    options, feeds = benchmark_setup(ctx)
    work_dir = ctx.scratch_dir / "ablation"
    work_dir.mkdir()
    on_gpu = ctx.config["backend"] == "tensorrt"
    runner_for: RunnerFor = (lambda path: _stage_engine_runner(ctx, path)) if on_gpu else (
        onnxruntime_stage_runner)
    ctx.ablation = run_ablation(
        onnx.load(source),
        feeds,
        options,
        backend=ctx.config["backend"],
        batch_size=batch_size_of(ctx),
        work_dir=work_dir,
        runner_for=runner_for,
    )


def _stage_engine_runner(ctx: JobContext, stage_model: Path) -> AbstractContextManager[Runner]:
    """Build and load the TensorRT engine of one ablation stage's model."""
    stage_model = model_at_job_precision(ctx, stage_model)
    engine = build_job_engine(
        ctx, stage_model, stage_model.with_suffix(".engine"),
        label=f"TensorRT build of ablation stage {stage_model.stem}", stage="ablation",
        progress_span=_BUILD_PROGRESS)
    return open_engine_runner(engine)
