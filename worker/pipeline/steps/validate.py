"""Stage `validate`: the engine must reproduce the original model's outputs within tolerance.

The reference is always the uploaded model, unmodified, in ONNX Runtime with every graph
optimization disabled. fp32 engines are compared output for output; fp16/bf16 engines are judged
on their backend where it computes at that precision (TensorRT), else by emulating the converted
graph on the CPU (ONNX Runtime's CPU kernels compute in fp32 and would hide overflow;
optimizer/precision/emulate.py says how faithful that is).
"""

import math
from dataclasses import replace
from typing import Any

import onnx

from core.job_config import JobConfig
from core.reports import AccuracyReport
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.precision import evaluate_precision
from optimizer.registries.precisions import PRECISIONS
from optimizer.validation import Tolerances, default_tolerances, validate_against, with_inputs
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import BuiltEngine, JobRun, LoadedModel, OptimizedModel, Validation

__all__ = ["job_tolerances", "validate_engine", "validate_original"]


def job_tolerances(config: JobConfig) -> Tolerances:
    """The precision's defaults with the job's overrides applied; an int8 job's accuracy
    budget, when it gives one, is part of them (its search and its verdict hold to one set)."""
    tolerances = default_tolerances(config.precision)
    if PRECISIONS[config.precision].quantizes:
        # The stored budget is whole (JobConfig filled in int8's defaults for what was not
        # given); a limit it leaves unset is not checked.
        budget = config.accuracy_budget
        tolerances = replace(
            tolerances,
            min_cosine=budget.min_cosine if budget.min_cosine is not None else -1.0,
            min_top1_agreement=budget.min_top1_agreement,
            atol=budget.max_abs_err if budget.max_abs_err is not None else math.inf,
            max_accuracy_drop=budget.max_accuracy_drop)
    return tolerances.with_overrides(config.validation.tolerance_overrides())


def validate_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                    optimized: OptimizedModel, engine: BuiltEngine[Any]) -> Validation:
    """The verdict on `engine` against the original on the job's feeds (not raised: the
    pipeline records it first)."""
    tolerances = job_tolerances(run.config)
    if not PRECISIONS[run.config.precision].converts:
        return _output_for_output(run, backend, loaded, engine, tolerances,
                                  f"the engine of job {run.job_id}")
    with backend.precision_runner(engine) as candidate:
        emulated = onnx.load(optimized.engine_source) if candidate is None else None
        evaluation = evaluate_precision(
            onnx.load(loaded.static_path), emulated, loaded.feeds,
            precision=run.config.precision, tolerances=tolerances, candidate=candidate,
        )
    return Validation(
        report=with_inputs(evaluation.validation, loaded.feeds, loaded.input_ranges),
        accuracy=AccuracyReport(precision_evaluation={"method": evaluation.method,
                                                      "backend": evaluation.backend}),
        subject=(f"the {run.config.precision} model of job {run.job_id} ({evaluation.method} "
                 f"on {evaluation.backend})"),
    )


def validate_original(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                      engine: BuiltEngine[Any]) -> Validation:
    """The verdict on the original shipped as the engine (`JobBackend.original_engine`), output
    for output at the job's tolerances: the job's verdict is then on what ships. It never
    stops the original shipping: it is the user's own model."""
    return _output_for_output(run, backend, loaded, engine, job_tolerances(run.config),
                              f"the original model of job {run.job_id}, as shipped")


def _output_for_output(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                       engine: BuiltEngine[Any], tolerances: Tolerances,
                       subject: str) -> Validation:
    # The original's session closes before the engine's opens: a model is held once.
    with OnnxRuntimeRunner(run.model_path, optimization_level="disabled") as reference:
        expected = [reference.infer(feed) for feed in loaded.feeds]
    with backend.open_runner(engine) as candidate:
        report = validate_against(expected, candidate, loaded.feeds, tolerances,
                                  labels=loaded.labels, input_ranges=loaded.input_ranges)
    return Validation(report=report, accuracy=AccuracyReport(), subject=subject)
