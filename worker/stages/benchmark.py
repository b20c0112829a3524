"""Stage `benchmark`: time the original and the engine interleaved in one process."""

import numpy as np

from optimizer.backends.onnxruntime.build import runner_for_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.errors import InternalError
from optimizer.inputs import random_feeds
from worker.context import JobContext


def batch_size_of(ctx: JobContext) -> int:
    """The leading dim of the first input is the batch by convention; a scalar input means 1."""
    first_shape = next(iter(ctx.input_shapes.values()), ())
    return first_shape[0] if first_shape else 1


def benchmark_setup(ctx: JobContext) -> tuple[BenchmarkOptions, dict[str, np.ndarray]]:
    """The job's benchmark options and the one input batch every variant is timed on."""
    settings = ctx.config["benchmark"]
    options = BenchmarkOptions(
        warmup=settings["warmup"],
        iterations=settings["iterations"],
        measure_memory=settings["measure_memory"],
    )
    feeds = random_feeds(ctx.input_specs, count=1, seed=ctx.config["validation"]["seed"],
                         ranges=ctx.config.get("input_ranges"))[0]
    return options, feeds


def benchmark_variants(ctx: JobContext) -> None:
    if ctx.engine is None:
        raise InternalError("benchmark ran before build_engine")
    options, feeds = benchmark_setup(ctx)
    with (
        OnnxRuntimeRunner(ctx.model_path, optimization_level="disabled") as original,
        runner_for_engine(ctx.engine.manifest_path) as engine,
    ):
        ctx.benchmarks = benchmark_interleaved(
            {"original": original, "engine": engine},
            feeds,
            options,
            reference="original",
            batch_size=batch_size_of(ctx),
        )
