"""Stage `ablation` (when the job asks for it): benchmark the fusion stages cumulatively.

onnxruntime: each stage's model in ONNX Runtime with its own optimizations off.
tensorrt: a TensorRT engine of each stage's model (at the job's precision) on this worker's GPU,
so the table shows what each fusion family adds on top of TensorRT's own fusions.
"""

from typing import Any

import onnx

from optimizer.measure.ablation import run_ablation
from optimizer.measure.benchmark import BenchmarkResult
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import JobRun, LoadedModel
from worker.pipeline.stages import ProgressSpan
from worker.pipeline.steps.benchmark import benchmark_setup

__all__ = ["benchmark_ablation"]


def benchmark_ablation(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                       span: ProgressSpan) -> list[BenchmarkResult]:
    options, feeds = benchmark_setup(run, loaded)
    work_dir = run.scratch_dir / "ablation"
    work_dir.mkdir()
    return run_ablation(
        onnx.load(loaded.fusion_source),
        feeds,
        options,
        backend=run.config.backend,
        batch_size=loaded.batch_size,
        work_dir=work_dir,
        runner_for=backend.ablation_runner_for(loaded, span),
    )
