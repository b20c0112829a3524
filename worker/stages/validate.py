"""Stage `validate`: the engine must reproduce the original model's outputs within tolerance.

The reference is always the uploaded model, unmodified, in ONNX Runtime with every graph
optimization disabled.
"""

from dataclasses import replace

from optimizer.backends.onnxruntime.build import runner_for_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import InternalError
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
    ctx.validation.raise_if_failed(f"the engine of job {ctx.job_id}")
