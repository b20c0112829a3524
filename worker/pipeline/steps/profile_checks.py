"""Check a TensorRT engine built for a range of shapes at both ends of that range.

Validation runs at one shape per input (the job's `input_shapes`, by default the profiles'
`opt`). An engine with optimization profiles also runs at every other shape within them, with
kernels TensorRT chose per shape range, and a fused rule or plugin may only break at some
shapes; so a couple of seeded samples at the profiles' `min` and at their `max` are compared
with the original model too. A failure there fails the job, naming the shapes.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import onnx

from optimizer.backends.runner import Runner
from optimizer.errors import InternalError
from optimizer.jsonable import json_safe
from optimizer.model.tensor_specs import TensorSpec
from optimizer.precision import evaluate_precision
from optimizer.validation import Tolerances, ValidationReport
from worker.pipeline.results import JobRun, LoadedModel
from worker.pipeline.steps.feeds import random_job_feeds

__all__ = ["ProfileChecks", "check_profile_extremes"]

_SAMPLES = 2


@dataclass
class ProfileChecks:
    """The verdict at each end checked ("min", "max"), and the first one that failed."""

    results: dict[str, Any] = field(default_factory=dict)
    failed: tuple[str, ValidationReport] | None = None  # (what was checked, its verdict)

    def raise_if_failed(self) -> None:
        """Raises AccuracyMismatchError: the engine differs beyond tolerance at an end."""
        if self.failed is not None:
            subject, report = self.failed
            report.raise_if_failed(subject)


def check_profile_extremes(run: JobRun, loaded: LoadedModel, engine: Runner,
                           tolerances: Tolerances) -> ProfileChecks:
    """Compare `engine` with the original at the profiles' min and max shapes (stopping at the
    first end that fails); nothing to check without profiles."""
    checks = ProfileChecks()
    profiles = run.config.profile_shapes()
    if not profiles:
        return checks
    original = onnx.load(run.model_path)  # the upload itself, dynamic dims and all
    for end in ("min", "max"):
        specs = _specs_at(loaded.input_specs, profiles, end)
        if all(spec.shape == loaded.input_shapes.get(spec.name) for spec in specs):
            continue  # the shapes validation already ran at
        feeds = random_job_feeds(run.config, specs, loaded.input_ranges, count=_SAMPLES,
                                 seed_offset=1)
        evaluation = evaluate_precision(original, None, feeds, precision=run.config.precision,
                                        tolerances=tolerances, candidate=engine)
        report = evaluation.validation
        checks.results[end] = json_safe({
            "input_shapes": {spec.name: list(spec.shape) for spec in specs},
            "samples": report.samples,
            "passed": report.passed,
            "max_abs_err": {o.name: o.max_abs_err for o in report.outputs},
            "failures": [failure.to_dict() for failure in report.failures],
        })
        if not report.passed:
            shapes = ", ".join(f"{spec.name} {list(spec.shape)}" for spec in specs)
            checks.failed = (f"the engine of job {run.job_id} at its profiles' {end} shapes "
                             f"({shapes})", report)
            break
    return checks


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
