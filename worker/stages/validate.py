"""Stage `validate`: the engine must reproduce the original model's outputs within tolerance.

The reference is always the uploaded model, unmodified, in ONNX Runtime with every graph
optimization disabled.
"""

from dataclasses import replace

from optimizer.backends.onnxruntime.build import runner_for_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import AccuracyMismatchError, InternalError
from optimizer.inputs import random_feeds
from optimizer.validation import default_tolerances, validate
from worker.context import JobContext


def validate_engine(ctx: JobContext) -> None:
    if ctx.engine is None:
        raise InternalError("validate ran before build_engine")
    settings = ctx.config["validation"]
    tolerances = default_tolerances(ctx.config["precision"])
    overrides = {k: settings[k] for k in ("atol", "rtol", "min_cosine") if settings.get(k) is not None}
    tolerances = replace(tolerances, **overrides)
    feeds = random_feeds(ctx.input_specs, count=settings["samples"], seed=settings["seed"])
    with (
        OnnxRuntimeRunner(ctx.model_path, optimization_level="disabled") as reference,
        runner_for_engine(ctx.engine.manifest_path) as candidate,
    ):
        ctx.validation = validate(reference, candidate, feeds, tolerances)
    if not ctx.validation.passed:
        failed = [o for o in ctx.validation.outputs if not o.passed]
        details = "; ".join(
            f"output '{o.name}': max_abs_err {o.max_abs_err:.3g}, max_rel_err {o.max_rel_err:.3g}, "
            f"cosine {o.cosine_similarity:.6f}"
            for o in failed
        )
        raise AccuracyMismatchError(
            f"the engine's outputs differ from the original model's beyond tolerance "
            f"(atol {tolerances.atol:g}, rtol {tolerances.rtol:g}, min cosine "
            f"{tolerances.min_cosine:g}) on {len(failed)} of {len(ctx.validation.outputs)} "
            f"output(s): {details}"
        )
