"""What `fuseforge validate` runs (its arguments: fuseforge_cli/validate_parser.py): a job's accuracy
check of a candidate model against the original, locally."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx

from fuseforge_cli.bisect_candidate import Bisection, bisect_candidate
from fuseforge_cli.validate_parser import DEFAULT_SAMPLES
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import OptimizerError
from optimizer.fusion_report import FusionReport
from optimizer.inputs import random_feeds
from optimizer.model_check import check_model_file
from optimizer.optimize import OptimizeOptions, select_passes
from optimizer.passes import DEFAULT_PASSES, FusionPass
from optimizer.shapes import resolve_input_shapes
from optimizer.tensor_specs import TensorSpec
from optimizer.validation.compare import OutputComparison, ValidationReport, validate
from optimizer.validation.datasets import load_dataset
from optimizer.validation.localize import Divergence, localize_divergence
from optimizer.validation.tolerances import Tolerances, default_tolerances

__all__ = [
    "ValidationPlan",
    "check",
    "localize",
    "plan_validation",
    "render_report",
    "run_validate",
]

EXIT_PASSED, EXIT_FAILED, EXIT_CANNOT_VALIDATE = 0, 1, 2
# As a job does (worker/pipeline/diagnose.py): the first divergent tensor shows on a few samples,
# and each sample runs both models with every shared tensor as an output.
LOCALIZE_SAMPLES = 2
_T = TypeVar("_T")


@dataclass(frozen=True)
class ValidationPlan:
    """Everything a check needs, resolved from the arguments: reusable by a later bisection."""

    original: Path
    candidate: Path
    dataset: Path | None  # None: seeded random inputs
    inputs: tuple[TensorSpec, ...]  # the original's, with the shapes the feeds have
    feeds: list[dict[str, np.ndarray]]
    labels: np.ndarray | None
    tolerances: Tolerances
    class_outputs: tuple[str, ...] | None


def plan_validation(args: argparse.Namespace) -> ValidationPlan:
    """Check both models and build the feeds and tolerances the arguments ask for.

    Raises:
        OptimizerError: an unreadable model, bad shapes or ranges, a dataset that does not
            fit, or models whose inputs differ.
        ValueError: a bad --samples, --precision or --tolerance.
    """
    summary = check_model_file(args.original)
    candidate = check_model_file(args.candidate)
    _require_same_inputs(summary.inputs, candidate.inputs, args.candidate)
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}.")
    tolerances = default_tolerances(args.precision).with_overrides(dict(args.tolerance))
    inputs = summary.inputs
    if args.dataset is None or args.input_shape:
        shapes = resolve_input_shapes(summary.inputs, dict(args.input_shape))
        inputs = tuple(TensorSpec(spec.name, spec.dtype, shapes[spec.name]) for spec in inputs)
    labels = None
    if args.dataset is not None:
        # Dynamic dims not fixed by --input-shape take their size from the dataset.
        dataset = load_dataset(args.dataset, inputs)
        count = min(args.samples or dataset.samples, dataset.samples)
        feeds = dataset.feeds[:count]
        labels = None if dataset.labels is None else dataset.labels[:count]
    else:
        feeds = random_feeds(inputs, count=args.samples or DEFAULT_SAMPLES, seed=args.seed,
                             ranges=dict(args.input_range))
    return ValidationPlan(
        original=args.original, candidate=args.candidate, dataset=args.dataset, inputs=inputs,
        feeds=feeds, labels=labels, tolerances=tolerances,
        class_outputs=None if args.class_output is None else tuple(args.class_output))


def check(plan: ValidationPlan) -> ValidationReport:
    """Run the original (ORT, optimizations disabled) and the candidate on the plan's feeds."""
    with (
        OnnxRuntimeRunner(plan.original, optimization_level="disabled") as reference,
        OnnxRuntimeRunner(plan.candidate, optimization_level="disabled") as candidate,
    ):
        return validate(reference, candidate, plan.feeds, plan.tolerances, labels=plan.labels,
                        class_outputs=plan.class_outputs)


def localize(plan: ValidationPlan, *, catalog: Sequence[FusionPass],
             fusion_report: FusionReport | None = None) -> Divergence | None:
    """The first tensor both models compute where the candidate leaves tolerance, over the
    plan's first LOCALIZE_SAMPLES feeds; None if every such tensor is within it. The rules it
    names are given passes by `fusion_report`, else by `catalog`.

    Raises:
        OptimizerError: ONNX Runtime cannot run a model with its intermediate tensors exposed.
    """
    return localize_divergence(onnx.load(plan.original), onnx.load(plan.candidate),
                               plan.feeds[:LOCALIZE_SAMPLES], plan.tolerances,
                               fusion_report=fusion_report, catalog=catalog)


def run_validate(args: argparse.Namespace) -> int:
    if args.dataset is not None and args.input_range:
        return _cannot_validate("--input-range shapes random inputs; it has no effect with "
                                "--dataset. Drop one of them.")
    if not args.bisect and (args.passes is not None or args.backend is not None):
        return _cannot_validate("--passes and --backend say how CANDIDATE was optimized, for "
                                "--bisect to optimize ORIGINAL the same way; add --bisect or "
                                "drop them.")
    options = OptimizeOptions(backend=args.backend or "onnxruntime",
                              passes="all" if args.passes is None else args.passes,
                              catalog=args.catalog or DEFAULT_PASSES)
    try:
        if args.bisect:
            select_passes(options)  # unknown pass names: exit 2 now
        plan = plan_validation(args)
        report = check(plan)
    except OptimizerError as err:
        return _cannot_validate(f"{type(err).__name__}: {err}")
    except ValueError as err:
        return _cannot_validate(str(err))
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
                                               fusion_report=fusion_report))
    if args.json:
        print(json.dumps({**report.to_dict(),
                          "localization": divergence.to_dict() if divergence else None,
                          **({"bisection": bisection.to_dict()} if bisection else {})},
                         indent=2))
    else:
        notes = [] if report.passed else [_localization_note(divergence)]
        print(render_report(report, plan,
                            notes=[*notes, *([bisection.describe()] if bisection else [])]))
    return EXIT_PASSED if report.passed else EXIT_FAILED


def _or_none(what: str, step: Callable[[], _T]) -> _T | None:
    """`step()`, or None after saying on stderr why it could not `what`."""
    try:
        return step()
    except OptimizerError as err:
        print(f"fuseforge validate: could not {what}: {type(err).__name__}: {err}",
              file=sys.stderr)
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
    header = ("output", "max_abs", "max_rel", "rmse", "snr_db", "cosine", "p99_abs", "top1",
              "top5", "acc ref/cand", "")
    rows = [header, *(_row(output) for output in report.outputs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip() for row in rows]
    if report.failures:
        lines.append(f"{len(report.failures)} limit(s) broken:")
        lines += [f"  - {failure.message}" for failure in report.failures]
    lines += notes
    tolerances = ", ".join(f"{key}={value:g}" for key, value in report.tolerances.to_dict().items())
    lines.append(f"{'PASSED' if report.passed else 'FAILED'} ({tolerances})")
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


def _cannot_validate(message: str) -> int:
    print(f"fuseforge validate: {message}", file=sys.stderr)
    return EXIT_CANNOT_VALIDATE


def _require_same_inputs(original: tuple[TensorSpec, ...], candidate: tuple[TensorSpec, ...],
                         candidate_path: Path) -> None:
    def describe(specs: tuple[TensorSpec, ...]) -> dict[str, str]:
        return {spec.name: spec.dtype for spec in specs}

    if describe(original) != describe(candidate):
        raise ValueError(
            f"Candidate {str(candidate_path)!r} takes inputs {describe(candidate)}, but the "
            f"original takes {describe(original)}; a candidate must take the same inputs "
            "(names and dtypes) to be compared.")
