"""Check a TensorRT engine built for a range of shapes at both ends of that range.

Validation runs at one shape per input (the job's `input_shapes`, by default the profiles'
`opt`). An engine with optimization profiles also runs at every other shape within them, with
kernels TensorRT chose per shape range, and a fused rule or plugin may only break at some
shapes; so a couple of seeded samples at the profiles' `min` and at their `max` are compared
with the original model too. A failure there fails the job, naming the shapes.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from optimizer.errors import InternalError
from optimizer.inputs import random_feeds
from optimizer.precision import evaluate_precision
from optimizer.tensor_specs import TensorSpec
from optimizer.validation import Tolerances
from worker.context import JobContext
from worker.engine_runners import open_engine_runner

__all__ = ["check_profile_extremes"]

_SAMPLES = 2


def check_profile_extremes(ctx: JobContext, tolerances: Tolerances) -> None:
    """Compare the engine with the original at the profiles' min and max shapes; the results
    go to `ctx.accuracy["profile_checks"]`.

    Raises:
        AccuracyMismatchError: the engine differs beyond `tolerances` at either end.
    """
    profiles: Mapping[str, Mapping[str, Sequence[int]]] | None = ctx.config.get("profiles")
    if not profiles:
        return
    original = onnx.load(ctx.model_path)  # the upload itself, dynamic dims and all
    checks: dict[str, Any] = {}
    ctx.accuracy["profile_checks"] = checks
    with open_engine_runner(ctx.engine) as engine:
        for end in ("min", "max"):
            specs = _specs_at(ctx.input_specs, profiles, end)
            if all(spec.shape == ctx.input_shapes.get(spec.name) for spec in specs):
                continue  # the shapes validation already ran at
            feeds = random_feeds(specs, count=_SAMPLES, seed=ctx.config["validation"]["seed"] + 1,
                                 ranges=ctx.config.get("input_ranges"))
            evaluation = evaluate_precision(original, None, feeds,
                                            precision=ctx.config["precision"],
                                            tolerances=tolerances, candidate=engine)
            report = evaluation.validation
            checks[end] = {
                "input_shapes": {spec.name: list(spec.shape) for spec in specs},
                "samples": report.samples,
                "passed": report.passed,
                "max_abs_err": {o.name: _finite(o.max_abs_err) for o in report.outputs},
                "failures": [failure.to_dict() for failure in report.failures],
            }
            shapes = ", ".join(f"{spec.name} {list(spec.shape)}" for spec in specs)
            report.raise_if_failed(f"the engine of job {ctx.job_id} at its profiles' {end} "
                                   f"shapes ({shapes})")


def _specs_at(specs: Sequence[TensorSpec], profiles: Mapping[str, Mapping[str, Sequence[int]]],
              end: str) -> list[TensorSpec]:
    chosen = []
    for spec in specs:
        if spec.name in profiles:
            chosen.append(replace(spec, shape=tuple(int(d) for d in profiles[spec.name][end])))
        elif all(isinstance(dim, int) for dim in spec.shape):
            chosen.append(spec)
        else:
            raise InternalError(f"input {spec.name!r} has no static shape after load")
    return chosen


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
