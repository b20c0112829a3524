"""Stage `benchmark`: time the original and the engine interleaved in one process, and at each
batch size of the job's sweep.

onnxruntime: the original model at ONNX Runtime's default level ("all"), what the user already
runs, against the engine; the original with every optimization off is timed alongside as
"original_unoptimized". tensorrt: TensorRT's engine of the unfused model against the engine, on
this worker's GPU. Every variant's speed-up is against "original".
"""

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from core.db.models import BenchmarkVariant
from optimizer.backends.runner import Runner
from optimizer.errors import OptimizerError
from optimizer.measure.benchmark import BenchmarkOptions, BenchmarkResult, benchmark_interleaved
from worker.pipeline.backends.base import JobBackend, SweepEngine
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel
from worker.pipeline.stages import ProgressSpan
from worker.pipeline.steps.feeds import random_job_feeds

__all__ = ["BenchmarkRun", "benchmark_engine", "benchmark_setup"]

logger = logging.getLogger(__name__)

_REFERENCE_BUILD_SHARE = 2 / 3  # of the stage's progress: building a reference engine, if any
_REFERENCE_BUILD_SHARE_SWEEPING = 1 / 3  # the same when a batch sweep follows


@dataclass
class BenchmarkRun:
    """The stage's records: the comparison suite, the sweep's, and the reference engine's
    metadata (if the backend built one)."""

    comparison: list[BenchmarkResult]
    sweep: list[BenchmarkResult] = field(default_factory=list)
    reference_engine: dict[str, Any] | None = None


def benchmark_setup(run: JobRun, loaded: LoadedModel) -> tuple[BenchmarkOptions, dict[str, np.ndarray]]:
    """The job's benchmark options and the one input batch every variant is timed on."""
    settings = run.config.benchmark
    options = BenchmarkOptions(warmup=settings.warmup, iterations=settings.iterations,
                               measure_memory=settings.measure_memory,
                               warmup_cv_threshold=settings.warmup_cv_threshold,
                               max_warmup=settings.max_warmup, seed=run.config.validation.seed)
    return options, random_job_feeds(run.config, loaded.input_specs, loaded.input_ranges,
                                     count=1)[0]


def benchmark_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                     engine: BuiltEngine[Any], span: ProgressSpan,
                     note: Callable[[str], None]) -> BenchmarkRun:
    """Time "original", "original_unoptimized" (where the backend has it) and "engine"; then,
    when the job asks for a sweep, "original" and "engine" at each batch size (`note` records
    each batch size skipped, and why)."""
    options, feeds = benchmark_setup(run, loaded)
    batches = run.config.benchmark.batch_sizes or []
    build_share = _REFERENCE_BUILD_SHARE_SWEEPING if batches else _REFERENCE_BUILD_SHARE
    reference = backend.benchmark_reference(loaded, span.part(0, build_share))
    with ExitStack() as stack:
        stack.enter_context(backend.timing_lock())
        original = stack.enter_context(reference.open())
        variants: dict[str, Runner] = {BenchmarkVariant.ORIGINAL: original}
        if reference.unoptimized is not None:
            variants[BenchmarkVariant.ORIGINAL_UNOPTIMIZED] = stack.enter_context(
                reference.unoptimized())
        variants[BenchmarkVariant.ENGINE] = stack.enter_context(backend.open_runner(engine))
        comparison = benchmark_interleaved(variants, feeds, options,
                                           reference=BenchmarkVariant.ORIGINAL,
                                           batch_size=loaded.batch_size)
        sweep = [result for batch in batches
                 for result in _sweep_point(run, backend, loaded, engine, original, options,
                                            batch, note)]
    return BenchmarkRun(comparison=comparison, sweep=sweep,
                        reference_engine=reference.engine_metadata)


def _sweep_point(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                 engine: BuiltEngine[Any], original: Runner, options: BenchmarkOptions,
                 batch: int, note: Callable[[str], None]) -> list[BenchmarkResult]:
    """"original" and "engine" at batch size `batch`; none when the engine cannot run there."""
    try:
        point = backend.sweep_engine(loaded, engine, batch)
    except OptimizerError as err:  # the engine at this batch could not be built
        point = f"the engine could not be built at this batch size ({err})"
    if isinstance(point, str):
        message = f"benchmark sweep: batch size {batch} skipped: {point}"
        logger.info("job %s: %s", run.job_id, message)
        note(message)
        return []
    feeds = random_job_feeds(run.config, _at_shapes(loaded, point), loaded.input_ranges,
                             count=1, seed_offset=batch)[0]
    with point.open() as candidate:
        pair: dict[str, Runner] = {BenchmarkVariant.ORIGINAL: original, BenchmarkVariant.ENGINE: candidate}
        return benchmark_interleaved(pair, feeds, options, reference=BenchmarkVariant.ORIGINAL,
                                     batch_size=batch)


def _at_shapes(loaded: LoadedModel, point: SweepEngine) -> tuple[Any, ...]:
    return tuple(replace(spec, shape=point.input_shapes[spec.name]) for spec in loaded.input_specs)
