"""Stage `validate`: the engine must reproduce the original model's outputs within tolerance.

The reference is always the uploaded model, unmodified, in ONNX Runtime with every graph
optimization disabled. When the engine fails, bisection names the rewrite rule(s) to blame; with
`"on_validation_failure": "fallback"` the job then keeps the largest validated set of rewrites
(see worker/fallback.py) instead of failing.
"""

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import fields
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import AccuracyMismatchError, InternalError
from optimizer.optimize import OptimizeOptions
from optimizer.precision import evaluate_precision
from optimizer.runner import Runner
from optimizer.validation import Tolerances, ValidationReport, default_tolerances, validate
from optimizer.validation.bisect import bisect_rules, equivalence_check
from optimizer.validation.localize import Divergence, localize_divergence
from worker.context import JobContext
from worker.engine_runners import open_engine_runner
from worker.feeds import job_feeds
from worker.stages.build_engine import build_engine
from worker.stages.optimize import optimize_graph
from worker.fallback import fall_back
from worker.profile_checks import check_profile_extremes


_LOCALIZE_SAMPLES = 2
TOLERANCE_FIELDS = frozenset(f.name for f in fields(Tolerances))


def job_tolerances(config: Mapping[str, Any]) -> Tolerances:
    """The precision's defaults with the job's overrides applied."""
    overrides = {k: v for k, v in config["validation"].items() if k in TOLERANCE_FIELDS}
    return default_tolerances(str(config["precision"])).with_overrides(overrides)


def validate_current_engine(
    ctx: JobContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances
) -> ValidationReport:
    with (
        OnnxRuntimeRunner(ctx.model_path, optimization_level="disabled") as reference,
        open_engine_runner(ctx.engine) as candidate,
    ):
        return validate(reference, candidate, feeds, tolerances, labels=ctx.labels)


def validate_engine(ctx: JobContext) -> None:
    tolerances = job_tolerances(ctx.config)
    feeds, ctx.labels = job_feeds(ctx)
    if ctx.config["precision"] != "fp32":
        _validate_precision(ctx, feeds, tolerances)
    else:
        _validate_fp32(ctx, feeds, tolerances)
    check_profile_extremes(ctx, tolerances)  # tensorrt engines built for a range of shapes


def _validate_fp32(
    ctx: JobContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances
) -> None:
    ctx.validation = validate_current_engine(ctx, feeds, tolerances)
    ctx.accuracy["passed_first_time"] = ctx.validation.passed
    if ctx.validation.passed:
        return
    _blame_rules(ctx, feeds, tolerances)
    divergence = _localize(ctx, feeds, tolerances)
    if ctx.config.get("on_validation_failure", "fail") == "fallback":
        fall_back(ctx, feeds, tolerances, rebuild=_rebuild, validate_engine=validate_current_engine)
        return
    try:
        ctx.validation.raise_if_failed(f"the engine of job {ctx.job_id}")
    except AccuracyMismatchError as err:
        where = f" First divergence: {divergence.describe()}" if divergence else ""
        raise AccuracyMismatchError(f"{err}{where} ({ctx.accuracy['blame']}).") from None


def _localize(
    ctx: JobContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances
) -> Divergence | None:
    """The first tensor where our fused graph departs from the original (ORT optimizations off;
    a few samples keep it quick)."""
    if ctx.static_model_path is None or ctx.fused_model_path is None:
        raise InternalError("validate ran before optimize")
    divergence = localize_divergence(
        onnx.load(ctx.static_model_path), onnx.load(ctx.fused_model_path),
        feeds[:_LOCALIZE_SAMPLES], tolerances, fusion_report=ctx.fusion_report,
    )
    ctx.accuracy["localization"] = divergence.to_dict() if divergence else None
    return divergence


def _validate_precision(
    ctx: JobContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances
) -> None:
    """fp16/bf16: a TensorRT engine is judged as it runs on the GPU. ONNX Runtime's CPU kernels
    compute in fp32 and would hide overflow, so there the converted graph is judged by
    emulation (optimizer/precision/emulate.py says how faithful)."""
    if ctx.static_model_path is None or ctx.engine_source_path is None:
        raise InternalError("validate ran before optimize")
    with _backend_runner(ctx) as candidate:
        emulated = onnx.load(ctx.engine_source_path) if candidate is None else None
        evaluation = evaluate_precision(
            onnx.load(ctx.static_model_path), emulated, feeds,
            precision=ctx.config["precision"], tolerances=tolerances, candidate=candidate,
        )
    ctx.validation = evaluation.validation
    ctx.accuracy["precision_evaluation"] = {"method": evaluation.method, "backend": evaluation.backend}
    ctx.validation.raise_if_failed(
        f"the {ctx.config['precision']} model of job {ctx.job_id} ({evaluation.method} on "
        f"{evaluation.backend})"
    )


def _backend_runner(ctx: JobContext) -> AbstractContextManager[Runner | None]:
    """The engine's runner where it computes at the job's precision (TensorRT on the GPU);
    None (emulate) for ONNX Runtime on the CPU."""
    if ctx.config["backend"] == "tensorrt":
        return open_engine_runner(ctx.engine)
    return nullcontext()


def _rebuild(ctx: JobContext) -> None:
    optimize_graph(ctx)
    build_engine(ctx)


def _blame_rules(
    ctx: JobContext, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances
) -> None:
    """Bisect our rewrite rules (judged with ORT's own optimizations off)."""
    if ctx.static_model_path is None:
        raise InternalError("validate ran before load")
    static_model = onnx.load(ctx.static_model_path)
    options = OptimizeOptions(backend=ctx.config["backend"], passes=ctx.config["passes"])
    result = bisect_rules(static_model, options, equivalence_check(static_model, feeds, tolerances))
    ctx.accuracy["bisection"] = result.to_dict()
    if not result.culprits:
        ctx.accuracy["blame"] = (
            "our rewrites alone keep the outputs within tolerance; the difference comes from "
            f"ONNX Runtime's own '{ctx.config['ort_optimization_level']}' optimizations"
        )
    else:
        contexts = result.contexts or tuple(() for _ in result.culprits)
        ctx.accuracy["blame"] = "rule(s) " + ", ".join(
            "+".join(group) + (f" (on top of {', '.join(context)})" if context else "")
            for group, context in zip(result.culprits, contexts, strict=True)
        ) + " break equivalence"
