"""What `fuseforge validate` runs (its arguments: fuseforge_cli/validate_parser.py): a job's accuracy
check of a candidate model against the original, locally."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx

from fuseforge_cli.arguments import DEFAULT_SAMPLES
from fuseforge_cli.bisect_candidate import Bisection, bisect_candidate
from fuseforge_cli.failures import (
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VALIDATION_FAILED,
    CliFailure,
    readable_file,
    warn,
)
from fuseforge_cli.runtime_logging import quiet_onnxruntime
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import OptimizerError
from optimizer.fusion_report import FusionReport
from optimizer.model.input_ranges import InputRange, effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec
from optimizer.model_check import check_model_file, load_checked_model
from optimizer.optimize import OptimizeOptions, select_passes
from optimizer.passes import DEFAULT_PASSES, FusionPass
from optimizer.registries.backends import DEFAULT_BACKEND
from optimizer.validation.compare import OutputComparison, ValidationReport, validate_against
from optimizer.validation.datasets import load_dataset
from optimizer.validation.localize import Divergence, localize_divergence
from optimizer.validation.shape_plan import InputShapes, validation_shapes
from optimizer.validation.tolerances import Tolerances, default_tolerances

__all__ = [
    "ValidationPlan",
    "check",
    "localize",
    "plan_validation",
    "render_report",
    "run_validate",
]

# As a job does (worker/pipeline/steps/diagnose.py): the first divergent tensor shows on a few samples,
# and each sample runs both models with every shared tensor as an output.
LOCALIZE_SAMPLES = 2
_T = TypeVar("_T")


@dataclass(frozen=True)
class ValidationPlan:
    """Everything a check needs, resolved from the arguments: reusable by a later bisection."""

    original: Path
    candidate: Path
    dataset: Path | None  # None: seeded random inputs
    inputs: tuple[TensorSpec, ...]  # the original's, with the shapes of the first feeds
    feeds: list[dict[str, np.ndarray]]  # at one or more input shapes (shape_plan.py)
    labels: np.ndarray | None
    tolerances: Tolerances
    class_outputs: tuple[str, ...] | None
    input_ranges: dict[str, InputRange] | None = None  # random feeds: given or inferred
    notes: tuple[str, ...] = ()  # e.g. a larger shape the original cannot run at


def plan_validation(args: argparse.Namespace) -> ValidationPlan:
    """Check both models and build the feeds and tolerances the arguments ask for.

    Random feeds: integer inputs are drawn in the ranges their use in the graph allows
    (optimizer/model/input_ranges.py) unless --input-range says otherwise; a model with dynamic dims
    and no --input-shape is checked at its default shape and at a larger one
    (optimizer/validation/shape_plan.py) where the original runs at it.

    Raises:
        CliFailure: a missing or unreadable file.
        OptimizerError: an unreadable model, bad shapes or ranges, a dataset that does not
            fit, or a model ONNX Runtime cannot run.
        ValueError: a bad --samples, --precision or --tolerance, or models whose inputs differ.
    """
    # Data files beside either model are checked to stay in its folder; ONNX Runtime reads them.
    model, summary = load_checked_model(readable_file(args.original, "original model"),
                                        external_data=True)
    candidate = check_model_file(readable_file(args.candidate, "candidate model"),
                                 external_data=True)
    _require_same_inputs(summary.inputs, candidate.inputs, args.candidate)
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}.")
    tolerances = default_tolerances(args.precision).with_overrides(dict(args.tolerance))
    plan = ValidationPlan(
        original=args.original, candidate=args.candidate, dataset=args.dataset,
        inputs=summary.inputs, feeds=[], labels=None, tolerances=tolerances,
        class_outputs=None if args.class_output is None else tuple(args.class_output))
    if args.dataset is not None:
        inputs = summary.inputs
        if args.input_shape:
            shapes = resolve_input_shapes(summary.inputs, dict(args.input_shape))
            inputs = _at(summary.inputs, shapes)
        # Dynamic dims not fixed by --input-shape take their size from the dataset.
        dataset = load_dataset(args.dataset, inputs)
        count = min(args.samples or dataset.samples, dataset.samples)
        return replace(plan, inputs=inputs, feeds=dataset.feeds[:count],
                       labels=None if dataset.labels is None else dataset.labels[:count])
    ranges = effective_ranges(infer_input_ranges(model), dict(args.input_range))
    shape_sets = validation_shapes(summary.inputs, dict(args.input_shape),
                                   fixed_by=candidate.inputs)
    feeds_by_shape = [random_feeds(_at(summary.inputs, shapes),
                                   count=args.samples or DEFAULT_SAMPLES,
                                   seed=args.seed + index, ranges=ranges)
                      for index, shapes in enumerate(shape_sets)]
    runnable, notes = _runnable_shapes(args.original, shape_sets, feeds_by_shape)
    return replace(plan, inputs=_at(summary.inputs, shape_sets[0]),
                   feeds=[feed for index in runnable for feed in feeds_by_shape[index]],
                   input_ranges=ranges, notes=notes)


def _at(inputs: tuple[TensorSpec, ...], shapes: InputShapes) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(spec.name, spec.dtype, shapes[spec.name]) for spec in inputs)


def _runnable_shapes(original: Path, shape_sets: list[InputShapes],
                     feeds_by_shape: list[list[dict[str, np.ndarray]]]
                     ) -> tuple[list[int], tuple[str, ...]]:
    # The first shape is the one asked for (or the default): a failure there is the user's to
    # see. A larger shape is ours to try: where the original cannot run at it (a Reshape to a
    # fixed size, a dim tied to another), it is dropped and the report says so.
    if len(shape_sets) == 1:
        return [0], ()
    runnable, notes = [0], []
    with OnnxRuntimeRunner(original, optimization_level="disabled") as reference:
        for index in range(1, len(shape_sets)):
            try:
                reference.infer(feeds_by_shape[index][0])
                runnable.append(index)
            except OptimizerError as err:
                shown = ", ".join(f"{name}={list(shape)}"
                                  for name, shape in shape_sets[index].items())
                first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
                notes.append(f"Not checked at {shown}: the original does not run at it "
                             f"({first_line[:300]}); give --input-shape to check other sizes.")
    return runnable, tuple(notes)


def check(plan: ValidationPlan) -> ValidationReport:
    """Run the original (ORT, optimizations disabled), then the candidate, on the plan's
    feeds: one model loaded at a time (a model with gigabytes of weights is held once)."""
    with OnnxRuntimeRunner(plan.original, optimization_level="disabled") as reference:
        expected = [reference.infer(feed) for feed in plan.feeds]
    with OnnxRuntimeRunner(plan.candidate, optimization_level="disabled") as candidate:
        report = validate_against(expected, candidate, plan.feeds, plan.tolerances,
                                  labels=plan.labels, class_outputs=plan.class_outputs,
                                  input_ranges=plan.input_ranges)
    return replace(report, notes=plan.notes)


def localize(plan: ValidationPlan, *, catalog: Sequence[FusionPass],
             fusion_report: FusionReport | None = None,
             report: ValidationReport | None = None) -> Divergence | None:
    """The first tensor both models compute where the candidate leaves tolerance, over the
    first LOCALIZE_SAMPLES feeds (at the first input shapes `report` says fail, else the
    plan's first); None if every such tensor is within it. The rules it names are given passes
    by `fusion_report`, else by `catalog`.

    Raises:
        OptimizerError: ONNX Runtime cannot run a model with its intermediate tensors exposed.
    """
    return localize_divergence(onnx.load(plan.original), onnx.load(plan.candidate),
                               _failing_feeds(plan, report)[:LOCALIZE_SAMPLES], plan.tolerances,
                               fusion_report=fusion_report, catalog=catalog)


def _failing_feeds(plan: ValidationPlan,
                   report: ValidationReport | None) -> list[dict[str, np.ndarray]]:
    failing = [check.input_shapes for check in (report.shapes if report else ())
               if not check.passed]
    if not failing:
        return plan.feeds
    wanted = failing[0]
    return [feed for feed in plan.feeds
            if all(tuple(np.shape(array)) == tuple(wanted.get(name, ()))
                   for name, array in feed.items())] or plan.feeds


def run_validate(args: argparse.Namespace) -> int:
    """Check args.candidate against args.original; the exit code (fuseforge_cli/failures.py):
    0 passed, 2 failed.

    Raises:
        CliFailure, OptimizerError, ValueError, OSError: main() says them as one line and an
            exit code.
    """
    quiet_onnxruntime(debug=args.debug)
    if args.dataset is not None and args.input_range:
        raise CliFailure("UsageError", "--input-range shapes random inputs; it has no effect "
                         "with --dataset. Drop one of them.", EXIT_USAGE)
    if not args.bisect and (args.passes is not None or args.backend is not None):
        raise CliFailure("UsageError", "--passes and --backend say how CANDIDATE was optimized, "
                         "for --bisect to optimize ORIGINAL the same way; add --bisect or drop "
                         "them.", EXIT_USAGE)
    options = OptimizeOptions(backend=args.backend or DEFAULT_BACKEND,
                              passes="all" if args.passes is None else args.passes,
                              catalog=args.catalog or DEFAULT_PASSES)
    if args.bisect:
        try:
            select_passes(options)  # unknown pass names: refused before any work
        except OptimizerError as err:
            raise CliFailure(type(err).__name__, str(err), EXIT_USAGE) from err
    plan = plan_validation(args)
    report = check(plan)
    divergence: Divergence | None = None
    bisection: Bisection | None = None
    if report.passed:
        bisection = Bisection(plan.candidate, options, result=None) if args.bisect else None
    else:
        if args.bisect:
            bisection = _or_none("bisect the rules", lambda: bisect_candidate(
                plan.original, plan.candidate, plan.feeds, plan.tolerances, options,
                labels=plan.labels, class_outputs=plan.class_outputs))
        # The re-optimization's report names the passes of the rules the localiser finds.
        fusion_report = bisection.report if bisection else None
        divergence = _or_none("localise the divergence",
                              lambda: localize(plan, catalog=options.catalog,
                                               fusion_report=fusion_report, report=report))
    code = EXIT_OK if report.passed else EXIT_VALIDATION_FAILED
    if args.json:
        print(json.dumps({**report.to_dict(),
                          "localization": divergence.to_dict() if divergence else None,
                          **({"bisection": bisection.to_dict()} if bisection else {}),
                          "exit_code": code},
                         indent=2))
    else:
        notes = [] if report.passed else [_localization_note(divergence)]
        print(render_report(report, plan,
                            notes=[*notes, *([bisection.describe()] if bisection else [])]))
    return code


def _or_none(what: str, step: Callable[[], _T]) -> _T | None:
    """`step()`, or None after saying on stderr why it could not `what`."""
    try:
        return step()
    except OptimizerError as err:
        warn("validate", f"could not {what}: {type(err).__name__}: {err}")
        return None


def _localization_note(divergence: Divergence | None) -> str:
    where = f"Localisation (first {LOCALIZE_SAMPLES} samples): "
    if divergence is not None:
        return where + divergence.describe()
    return where + ("every tensor both models compute is within tolerance, so the failure shows "
                    "only in metrics taken over all samples (top-k agreement, accuracy) or on "
                    "later samples.")


def render_report(report: ValidationReport, plan: ValidationPlan,
                  notes: Sequence[str] = ()) -> str:
    """The report as a table of outputs, then every failure, then `notes` (localisation,
    bisection), then the verdict."""
    source = "random inputs" if plan.dataset is None else f"dataset {plan.dataset}"
    if plan.labels is not None:
        source += " (with labels)"
    lines = [f"{plan.candidate} vs {plan.original} (the reference), {report.samples} "
             f"samples of {source}"]
    if len(report.shapes) > 1:
        lines.append(f"Checked at {len(report.shapes)} input shapes (dynamic dims, none given):")
        lines += [f"  {shape_check.describe()}" for shape_check in report.shapes]
    elif report.shapes:
        lines.append(f"Input shapes: {report.shapes[0].describe()}")
    lines += report.notes
    if report.input_ranges:
        lines.append("Integer input ranges:")
        lines += [f"  {spec.describe(name)}" for name, spec in report.input_ranges.items()]
    header = ("output", "max_abs", "max_rel", "rmse", "snr_db", "cosine", "p99_abs", "top1",
              "top5", "acc ref/cand", "")
    rows = [header, *(_row(output) for output in report.outputs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip() for row in rows]
    lines += [f"Output {output.name!r}: {output.not_judged_why}." for output in report.outputs
              if output.not_judged_why]
    if report.failures:
        lines.append(f"{len(report.failures)} limit(s) broken:")
        lines += [f"  - {failure.message}" for failure in report.failures]
    lines += notes
    tolerances = ", ".join(f"{key}={value:g}" for key, value in report.tolerances.to_dict().items())
    shapes = ""
    if report.shapes:
        shapes = " at " + "; ".join(
            ", ".join(f"{name}={list(shape)}" for name, shape in check.input_shapes.items())
            for check in report.shapes)
    lines.append(f"{'PASSED' if report.passed else 'FAILED'}{shapes} ({tolerances})")
    return "\n".join(lines)


def _row(output: OutputComparison) -> tuple[str, ...]:
    accuracy = "-"
    if output.reference_accuracy is not None and output.candidate_accuracy is not None:
        accuracy = f"{output.reference_accuracy:.2%}/{output.candidate_accuracy:.2%}"
    return (output.name, _num(output.max_abs_err), _num(output.max_rel_err), _num(output.rmse),
            _num(output.snr_db, ".1f"), _num(output.cosine_similarity, ".6f"),
            _num(output.abs_err_p99), _share(output.top1_agreement),
            _share(output.top5_agreement), accuracy, "ok" if output.passed else "FAIL")


def _num(value: float, spec: str = ".3g") -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format(value, spec)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _require_same_inputs(original: tuple[TensorSpec, ...], candidate: tuple[TensorSpec, ...],
                         candidate_path: Path) -> None:
    def describe(specs: tuple[TensorSpec, ...]) -> dict[str, str]:
        return {spec.name: spec.dtype for spec in specs}

    if describe(original) != describe(candidate):
        raise ValueError(
            f"Candidate {str(candidate_path)!r} takes inputs {describe(candidate)}, but the "
            f"original takes {describe(original)}; a candidate must take the same inputs "
            "(names and dtypes) to be compared.")
