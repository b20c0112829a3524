"""Stage `ablation` (when the job asks for it): benchmark the fusion stages cumulatively."""

import onnx

from optimizer.ablation import run_ablation
from optimizer.errors import InternalError
from worker.context import JobContext
from worker.stages.benchmark import batch_size_of, benchmark_setup


def benchmark_ablation(ctx: JobContext) -> None:
    if ctx.static_model_path is None:
        raise InternalError("ablation ran before load")
    options, feeds = benchmark_setup(ctx)
    work_dir = ctx.scratch_dir / "ablation"
    work_dir.mkdir()
    ctx.ablation = run_ablation(
        onnx.load(ctx.static_model_path),
        feeds,
        options,
        backend=ctx.config["backend"],
        batch_size=batch_size_of(ctx),
        work_dir=work_dir,
    )
