"""Stage `ablation` (when the job asks for it): benchmark the fusion stages cumulatively."""

import onnx

from optimizer.ablation import run_ablation
from optimizer.benchmark import BenchmarkOptions
from optimizer.errors import InternalError
from optimizer.inputs import random_feeds
from worker.context import JobContext
from worker.stages.benchmark import batch_size_of


def benchmark_ablation(ctx: JobContext) -> None:
    if ctx.static_model_path is None:
        raise InternalError("ablation ran before load")
    settings = ctx.config["benchmark"]
    options = BenchmarkOptions(
        warmup=settings["warmup"],
        iterations=settings["iterations"],
        measure_memory=settings["measure_memory"],
    )
    feeds = random_feeds(ctx.input_specs, count=1, seed=ctx.config["validation"]["seed"],
                         ranges=ctx.config.get("input_ranges"))[0]
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
