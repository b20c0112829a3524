"""Stage `benchmark`: time the unfused reference and the engine interleaved in one process.

onnxruntime: the original model with ONNX Runtime's optimizations off against the engine.
tensorrt: TensorRT's engine of the unfused model against the engine, on this worker's GPU.
"""

import numpy as np

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.errors import InternalError
from optimizer.inputs import random_feeds
from optimizer.runner import Runner
from worker.context import JobContext
from worker.engine_runners import open_engine_runner
from worker.reference_engine import build_reference_engine
from worker.tensorrt_build import gpu_lock

__all__ = ["batch_size_of", "benchmark_setup", "benchmark_variants"]

_REFERENCE_BUILD_PROGRESS = (0.6, 0.7)


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
    if ctx.config["backend"] == "tensorrt":
        reference = build_reference_engine(ctx, _REFERENCE_BUILD_PROGRESS)
        with gpu_lock(ctx, "benchmark"), open_engine_runner(reference) as original:
            _time(ctx, original, options, feeds)
        return
    with OnnxRuntimeRunner(ctx.model_path, optimization_level="disabled") as original:
        _time(ctx, original, options, feeds)


def _time(ctx: JobContext, original: Runner, options: BenchmarkOptions,
          feeds: dict[str, np.ndarray]) -> None:
    with open_engine_runner(ctx.engine) as engine:
        ctx.benchmarks = benchmark_interleaved(
            {"original": original, "engine": engine},
            feeds,
            options,
            reference="original",
            batch_size=batch_size_of(ctx),
        )
