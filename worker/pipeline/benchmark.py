"""Stage `benchmark`: time the unfused reference and the engine interleaved in one process.

onnxruntime: the original model with ONNX Runtime's optimizations off against the engine.
tensorrt: TensorRT's engine of the unfused model against the engine, on this worker's GPU.
"""

from typing import Any

import numpy as np

from optimizer.benchmark import BenchmarkOptions, BenchmarkResult, benchmark_interleaved
from worker.pipeline.backend import JobBackend
from worker.pipeline.feeds import random_job_feeds
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel
from worker.pipeline.stages import ProgressSpan

__all__ = ["benchmark_engine", "benchmark_setup"]

_REFERENCE_BUILD_SHARE = 2 / 3  # of the stage's progress: building a reference engine, if any


def benchmark_setup(run: JobRun, loaded: LoadedModel) -> tuple[BenchmarkOptions, dict[str, np.ndarray]]:
    """The job's benchmark options and the one input batch every variant is timed on."""
    settings = run.config.benchmark
    options = BenchmarkOptions(warmup=settings.warmup, iterations=settings.iterations,
                               measure_memory=settings.measure_memory)
    return options, random_job_feeds(run.config, loaded.input_specs, loaded.input_ranges,
                                     count=1)[0]


def benchmark_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                     engine: BuiltEngine[Any], span: ProgressSpan
                     ) -> tuple[list[BenchmarkResult], dict[str, Any] | None]:
    """The timings of "original" and "engine", and the reference engine's metadata (if the
    backend built one)."""
    options, feeds = benchmark_setup(run, loaded)
    reference = backend.benchmark_reference(loaded, span.part(0, _REFERENCE_BUILD_SHARE))
    with (
        backend.timing_lock(),
        reference.open() as original,
        backend.open_runner(engine) as candidate,
    ):
        results = benchmark_interleaved({"original": original, "engine": candidate}, feeds,
                                        options, reference="original",
                                        batch_size=loaded.batch_size)
    return results, reference.engine_metadata
