"""Stage `validate`: the engine must reproduce the original model's outputs within tolerance.

The reference is always the uploaded model, unmodified, in ONNX Runtime with every graph
optimization disabled. fp32 engines are compared output for output; fp16/bf16 engines are judged
on their backend where it computes at that precision (TensorRT), else by emulating the converted
graph on the CPU (ONNX Runtime's CPU kernels compute in fp32 and would hide overflow;
optimizer/precision/emulate.py says how faithful that is).
"""

from typing import Any

import onnx

from core.job_config import JobConfig
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.precision import evaluate_precision
from optimizer.validation import Tolerances, default_tolerances, validate, with_inputs
from worker.pipeline.backend import JobBackend
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel, OptimizedModel, Validation

__all__ = ["job_tolerances", "validate_engine"]


def job_tolerances(config: JobConfig) -> Tolerances:
    """The precision's defaults with the job's overrides applied."""
    return default_tolerances(config.precision).with_overrides(
        config.validation.tolerance_overrides())


def validate_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                    optimized: OptimizedModel, engine: BuiltEngine[Any]) -> Validation:
    """The verdict on `engine` against the original on the job's feeds (not raised: the
    pipeline records it first)."""
    tolerances = job_tolerances(run.config)
    if run.config.precision == "fp32":
        with (
            OnnxRuntimeRunner(run.model_path, optimization_level="disabled") as reference,
            backend.open_runner(engine) as candidate,
        ):
            report = validate(reference, candidate, loaded.feeds, tolerances, labels=loaded.labels,
                              input_ranges=loaded.input_ranges)
        return Validation(report=report, accuracy={}, subject=f"the engine of job {run.job_id}")
    with backend.precision_runner(engine) as candidate:
        emulated = onnx.load(optimized.engine_source) if candidate is None else None
        evaluation = evaluate_precision(
            onnx.load(loaded.static_path), emulated, loaded.feeds,
            precision=run.config.precision, tolerances=tolerances, candidate=candidate,
        )
    return Validation(
        report=with_inputs(evaluation.validation, loaded.feeds, loaded.input_ranges),
        accuracy={"precision_evaluation": {"method": evaluation.method,
                                           "backend": evaluation.backend}},
        subject=(f"the {run.config.precision} model of job {run.job_id} ({evaluation.method} "
                 f"on {evaluation.backend})"),
    )
