"""What a benchmark record needs beside its timings to be trusted: where it ran (the
environment and its key) and its physical context (the bytes an inference moves at least, the
rate that makes at the record's median latency, and its fraction of the worker's measured
memory bandwidth).

Gathered once when the benchmark stages end (`benchmark_context`), while the models they timed
are still in the scratch folder, and applied to every record the job writes (`fill_context`):
comparison, ablation and any other suite, each at its own batch size.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from core.db.models import BenchmarkRecord, BenchmarkVariant
from optimizer.measure.environment import capture_environment
from optimizer.measure.memory_bandwidth import memory_bandwidth_gb_s
from optimizer.measure.traffic import ModelTraffic, model_traffic
from worker.pipeline.results import (
    BenchmarkContext,
    JobOutcome,
    JobRun,
    LoadedModel,
    PendingArtifact,
)

__all__ = ["benchmark_context", "fill_context"]


def benchmark_context(run: JobRun, loaded: LoadedModel, outcome: JobOutcome) -> BenchmarkContext:
    """The job's context, after its benchmark stages: the environment now, with the bandwidth
    its worker measured at start-up (measured here if it was not), and the traffic of each
    model it timed."""
    # The runners open with ONNX Runtime's default intra-op threads (None: one per core).
    environment = capture_environment(threads=None, worker=run.worker,
                                      memory_bandwidth_gb_s=run.memory_bandwidth_gb_s
                                      or memory_bandwidth_gb_s())
    original = model_traffic(loaded.static_path)
    traffic: dict[str, ModelTraffic] = {  # one model, two session levels
        BenchmarkVariant.ORIGINAL: original, BenchmarkVariant.ORIGINAL_UNOPTIMIZED: original}
    engine_model = _engine_model(outcome.artifacts.values())
    if engine_model is not None:
        traffic[BenchmarkVariant.ENGINE] = model_traffic(engine_model)
    ablation = {}
    ablation_dir = run.scratch_dir / "ablation"
    for result in outcome.ablation:
        path = ablation_dir / f"ablation-{result.variant}.onnx"
        if path.is_file():
            ablation[result.variant] = model_traffic(path)
    return BenchmarkContext(environment, traffic, ablation)


def fill_context(records: Iterable[BenchmarkRecord],
                 context: BenchmarkContext | None) -> list[BenchmarkRecord]:
    """`records`, each with its context columns set (unchanged without a context: a job that
    failed before benchmarking)."""
    filled = list(records)
    if context is None:
        return filled
    for record in filled:
        for name, value in context.columns(record.suite, record.variant, record.batch_size,
                                           record.latency_ms_p50).items():
            setattr(record, name, value)
    return filled


def _engine_model(artifacts: Iterable[PendingArtifact]) -> Path | None:
    """The ONNX file whose weights the engine holds: ONNX Runtime's engine.onnx; for a TensorRT
    engine (a plan, whose size includes tactics and padding), the model it was built from: the
    precision-converted model if there is one, else fused.onnx."""
    onnx_files = [a for a in artifacts if a.name.endswith(".onnx") and a.path.is_file()]
    for artifact in onnx_files:
        if artifact.kind == "engine":
            return artifact.path
    converted = [a for a in onnx_files if a.kind == "optimized_model" and a.name != "fused.onnx"]
    fused = [a for a in onnx_files if a.name == "fused.onnx"]
    chosen = (converted or fused)[-1:]
    return chosen[0].path if chosen else None
