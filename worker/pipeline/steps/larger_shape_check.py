"""Check the job's rewrites at a larger shape when the job left the model's dims dynamic.

A job with no `input_shapes` builds and validates its engine with every dynamic dim at 1, and a
transformer at sequence length 1 takes a softmax over one key, which is 1 whatever the scores
and the mask: a broken attention or mask rewrite passes there. So such a job also fixes the
upload at a larger shape (batch 2, other dynamic dims 16: `validation_shapes`), applies the same
rewrites, and compares the result with the original in ONNX Runtime (optimizations off, plugin
nodes decomposed: the rewrites are judged, not a backend). The engine itself is static at the
job's shapes and is not run there. A failure fails the job, naming the shapes and how to avoid
them; a larger shape the model cannot run at is skipped and said.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import runner_for_model
from optimizer.backends.runner import Runner
from optimizer.errors import AccuracyMismatchError, InferenceError, InputShapeError
from optimizer.jsonable import json_safe
from optimizer.model.shapes import fix_input_shapes
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.registries.precisions import REFERENCE_PRECISION
from optimizer.validation import Tolerances, ValidationReport, default_tolerances, validate
from optimizer.validation.shape_plan import validation_shapes
from worker.pipeline.results import JobRun, LoadedModel
from worker.pipeline.steps.feeds import random_job_feeds

__all__ = ["LargerShapeCheck", "check_rewrites_at_larger_shape"]

_SAMPLES = 2


@dataclass(frozen=True)
class LargerShapeCheck:
    """What was checked (for the accuracy report), and the verdict when there was one."""

    record: dict[str, Any]
    report: ValidationReport | None = None

    def raise_if_failed(self, job_id: object) -> None:
        """Raises AccuracyMismatchError: the rewrites change the outputs at the larger shape."""
        if self.report is None or self.report.passed:
            return
        shapes = _shown(self.record["input_shapes"])
        try:
            self.report.raise_if_failed(f"the rewrites of job {job_id} at input shapes {shapes}")
        except AccuracyMismatchError as err:
            raise AccuracyMismatchError(
                f"{err} The engine passed at the job's own shapes, which leave the model's "
                f"dynamic dims at 1; give input_shapes to build at the sizes you run, or leave "
                "out the passes the fusion report lists for these ops.") from None


def check_rewrites_at_larger_shape(run: JobRun, loaded: LoadedModel,
                                   options: OptimizeOptions) -> LargerShapeCheck | None:
    """Apply the rewrites `options` (the validated attempt's) ask for to the model at a larger
    shape and compare. None where there is nothing to add: the job gave input shapes or
    profiles, or the model has no dynamic dim."""
    if run.config.input_shapes or run.config.profiles:
        return None
    original = onnx.load(run.model_path)
    inputs = summarize_model(original).inputs
    try:
        shapes = validation_shapes(inputs, {})
    except InputShapeError:
        return None
    if len(shapes) < 2:
        return None
    larger = shapes[1]
    record: dict[str, Any] = {"input_shapes": {name: list(dims) for name, dims in larger.items()}}
    specs = [TensorSpec(spec.name, spec.dtype, larger[spec.name]) for spec in inputs]
    feeds = random_job_feeds(run.config, specs, loaded.input_ranges, count=_SAMPLES,
                             seed_offset=2)
    static = fix_input_shapes(original, larger)
    with runner_for_model(static) as reference:  # one session of the original serves both
        problem = _run_problem(reference, feeds[0])
        if problem is not None:
            record["skipped"] = f"the original model does not run at these shapes: {problem}"
            return LargerShapeCheck(record)
        fused, _ = optimize_model(static, options)
        with runner_for_model(fused) as candidate:
            report = validate(reference, candidate, feeds, _rewrite_tolerances(run),
                              input_ranges=loaded.input_ranges)
    record.update(passed=report.passed, samples=report.samples,
                  max_abs_err={output.name: output.max_abs_err for output in report.outputs},
                  failures=[failure.to_dict() for failure in report.failures])
    return LargerShapeCheck(json_safe(record), report)


def _run_problem(reference: Runner, feed: Mapping[str, np.ndarray]) -> str | None:
    # Why the original cannot serve at these shapes: it fails, or an output comes out empty.
    try:
        outputs = reference.infer(feed)
    except InferenceError as err:
        return str(err).splitlines()[0]
    empty = [name for name, value in outputs.items() if value.size == 0]
    return f"output {empty[0]!r} comes out empty" if empty else None


def _rewrite_tolerances(run: JobRun) -> Tolerances:
    # The rewrites are checked in fp32 whatever the job's precision: the conversion is judged
    # by the engine's own validation.
    overrides = run.config.validation.tolerance_overrides() \
        if run.config.precision == REFERENCE_PRECISION else {}
    return default_tolerances(REFERENCE_PRECISION).with_overrides(overrides)


def _shown(shapes: Mapping[str, list[int]]) -> str:
    return ", ".join(f"{name}={dims}" for name, dims in shapes.items())
