"""Decide whether an optimized model's outputs match the original's within stated tolerances.

The reference is always the original model, unmodified, in fp32 (callers pass its runner
first); the limits live in `optimizer.validation.tolerances`, the metrics themselves in
`optimizer.validation.metrics`.

Each output is judged against its own scale. The elementwise test |c - r| <= atol + rtol·|r|
(np.allclose's) always decides. The scale-relative limits (cosine similarity, SNR, max relative
error) are judged only where the reference has energy: its RMS above `atol`. An output at or
below that is near zero (a detector's probability map on random inputs, a residual that
cancels), and there the cosine of two near-zero vectors measures rounding noise, not agreement:
PP-OCRv5's detector differs by 2.4e-7 at most on an output of RMS 7e-7 and scores a cosine of
0.9988. As numpy's allclose lets atol decide for values near zero, the absolute test decides
for such an output, and the report says which limits it did not judge and why
(`OutputComparison.not_judged`). An infinite atol (int8's defaults: no elementwise limit) makes
no output near zero: the cosine is then the test.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from optimizer.backends.runner import Runner
from optimizer.errors import AccuracyMismatchError, DatasetError, InternalError
from optimizer.jsonable import json_safe
from optimizer.model.input_ranges import InputRange
from optimizer.validation.metrics import (
    class_metrics,
    error_metrics,
    looks_like_class_scores,
    tolerance_excess,
)
from optimizer.validation.tolerances import Tolerances

__all__ = [
    "SCALE_RELATIVE_METRICS",
    "MetricFailure",
    "OutputComparison",
    "ShapeCheck",
    "ValidationReport",
    "compare_outputs",
    "validate",
    "validate_against",
    "with_inputs",
]


# The metrics measured against the output's own scale: judged only where the reference has
# energy (RMS above atol); see the module docstring.
SCALE_RELATIVE_METRICS = ("cosine_similarity", "snr_db", "max_rel_err")


@dataclass(frozen=True)
class OutputComparison:
    """How one output differs from the reference, over all samples together.

    The error fields are those of `metrics.ErrorMetrics`; the class fields (top-k agreement,
    accuracies) are None for outputs that are not class scores, accuracies also without labels.
    A missing output or a shape mismatch has infinite errors and a NaN cosine. `not_judged`
    names the limits of `SCALE_RELATIVE_METRICS` left unjudged on a near-zero output (its
    reference's RMS at or below atol), and `not_judged_why` says so with the numbers.
    """

    name: str
    max_abs_err: float
    max_rel_err: float
    mean_abs_err: float
    cosine_similarity: float  # NaN when the output is missing or its shape differs
    passed: bool
    rmse: float = math.nan
    snr_db: float = math.nan
    abs_err_p50: float = math.nan
    abs_err_p90: float = math.nan
    abs_err_p99: float = math.nan
    reference_nan_count: int = 0
    reference_inf_count: int = 0
    candidate_nan_count: int = 0
    candidate_inf_count: int = 0
    top1_agreement: float | None = None
    top5_agreement: float | None = None
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None
    accuracy_drop: float | None = None
    reference_rms: float = math.nan  # the reference's scale (RMS of its finite elements)
    not_judged: tuple[str, ...] = ()  # limits not judged on this near-zero output
    not_judged_why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON dict: non-finite numbers become None (PostgreSQL JSON rejects them)."""
        safe: dict[str, Any] = json_safe(asdict(self))
        return safe


@dataclass(frozen=True)
class MetricFailure:
    """One limit one output broke: the value found, the limit, and how far past it.

    `metric` is an `OutputComparison` field limited by `Tolerances` ("cosine_similarity",
    "snr_db", "top1_agreement"...), or one of "missing", "shape", "dtype" (value and limit are
    then descriptions), "elementwise" (value: the worst |c - r| / (atol + rtol·|r|), limit 1),
    "candidate_nan_count" / "candidate_inf_count" (limit: the reference's count).
    `excess` is how far the value is past the limit, in the metric's units (positive; None
    where value and limit are not numbers).
    """

    output: str
    metric: str
    value: float | str
    limit: float | str
    excess: float | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        safe: dict[str, Any] = json_safe(asdict(self))
        return safe


@dataclass(frozen=True)
class ShapeCheck:
    """The samples validated at one set of input shapes, and whether they alone pass."""

    input_shapes: dict[str, tuple[int, ...]]
    samples: int
    passed: bool

    def describe(self) -> str:
        """E.g. "input_ids=[2, 16], mask=[2, 16] (8 samples, passed)"."""
        shapes = ", ".join(f"{name}={list(shape)}" for name, shape in self.input_shapes.items())
        return f"{shapes} ({self.samples} samples, {'passed' if self.passed else 'FAILED'})"

    def to_dict(self) -> dict[str, Any]:
        return {"input_shapes": {name: list(shape) for name, shape in self.input_shapes.items()},
                "samples": self.samples, "passed": self.passed}


@dataclass(frozen=True)
class ValidationReport:
    passed: bool
    tolerances: Tolerances
    samples: int
    outputs: tuple[OutputComparison, ...]
    failures: tuple[MetricFailure, ...] = ()  # every limit broken, output by output
    shapes: tuple[ShapeCheck, ...] = ()  # the input shapes validated at (`validate` fills it)
    # The value ranges the random inputs were drawn from, given or inferred from the graph.
    input_ranges: dict[str, InputRange] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # e.g. a larger shape the original could not run at

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tolerances": self.tolerances.to_dict(),
            "samples": self.samples,
            "outputs": [output.to_dict() for output in self.outputs],
            "failures": [failure.to_dict() for failure in self.failures],
            "shapes": [check.to_dict() for check in self.shapes],
            "input_ranges": {name: r.to_dict() for name, r in self.input_ranges.items()},
            "notes": list(self.notes),
        }

    def raise_if_failed(self, subject: str, *, advice: str | None = None) -> None:
        """Raise AccuracyMismatchError listing every limit `subject` (e.g. a job) broke, then
        `advice` (what would make it pass, fitting the job: a wider precision only where one
        exists; "" for none); without it, the tolerances that failed, to loosen if the
        differences are acceptable.

        >>> report.raise_if_failed("engine for job 42")        # doctest: +SKIP
        """
        if self.passed:
            return
        details = "; ".join(failure.message for failure in self.failures)
        shapes = "; ".join(", ".join(f"{name}={list(shape)}"
                                     for name, shape in check.input_shapes.items())
                           for check in self.shapes)
        tail = self.loosen_advice() if advice is None else advice
        raise AccuracyMismatchError(
            f"The outputs of {subject} differ from the original model's beyond tolerance over "
            f"{self.samples} sample(s){f' at input shapes {shapes}' if shapes else ''}: "
            f"{details}." + (f" {tail}" if tail else ""))

    def failed_limits(self) -> tuple[str, ...]:
        """The `Tolerances` fields behind the failures, e.g. ("atol", "min_cosine"); empty
        where only a missing output, a shape or a dtype failed (no limit loosens those)."""
        names: dict[str, None] = {}
        for failure in self.failures:
            names.update((name, None) for name in _LIMIT_NAMES.get(failure.metric, ()))
        return tuple(names)

    def loosen_advice(self) -> str:
        """"Loosen ... if differences of this size are acceptable", naming the limits that
        failed and their values."""
        limits = self.tolerances.to_dict()
        named = ", ".join(f"{name} (now {limits[name]:g})" for name in self.failed_limits()
                          if name in limits)
        if not named:
            return "The outputs' names, shapes and types must match the original's."
        return (f"If differences of this size are acceptable, loosen {named} in the job's "
                "validation tolerances.")


def compare_outputs(
    reference: Sequence[Mapping[str, np.ndarray]],
    candidate: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    labels: np.ndarray | Sequence[np.ndarray] | None = None,
    class_outputs: Collection[str] | None = None,
) -> ValidationReport:
    """Compare each reference output with the candidate's, sample by sample.

    An output passes when it is present with the reference's shape and dtype, every element
    satisfies |c - r| <= atol + rtol * |r| (NaN only where the reference has NaN, infinities
    equal), the cosine similarity over all samples is at least `min_cosine`, and every optional
    limit set in `tolerances` holds; the cosine, SNR and relative-error limits only where the
    reference's RMS is above atol (see the module docstring). A missing output or a shape
    mismatch fails rather than raising.

    Class scores: `class_outputs` names the outputs whose last axis holds class scores; when
    None, every float output shaped [batch, classes >= 2] counts. `labels` (one entry per
    sample, e.g. a [samples] or [samples, batch] integer array) adds the task accuracy of both
    models to every class-score output with one prediction per label.

    Raises:
        InternalError: the two sequences hold different numbers of samples.
        DatasetError: labels for a different number of samples, labels that fit no
            class-score output, or a name in `class_outputs` that is no output or has fewer
            than 2 classes on its last axis.
    """
    if len(reference) != len(candidate):
        raise InternalError(
            f"compare_outputs got {len(reference)} reference samples but {len(candidate)} "
            "candidate samples; run both on the same feeds.")
    if labels is not None and len(labels) != len(reference):
        raise DatasetError(f"Got labels for {len(labels)} samples but outputs for "
                           f"{len(reference)}; give one entry of labels per sample.")
    label_rows = None if labels is None else [np.asarray(label) for label in labels]
    names = list(dict.fromkeys(name for sample in reference for name in sample))
    scored = _class_outputs(names, reference, class_outputs)
    labelled = _labelled_outputs(scored, reference, label_rows)
    outputs: list[OutputComparison] = []
    failures: list[MetricFailure] = []
    for name in names:
        output, output_failures = _compare_output(
            name, [sample[name] for sample in reference],
            [sample.get(name) for sample in candidate], tolerances,
            is_class=name in scored, labels=label_rows if name in labelled else None)
        outputs.append(output)
        failures.extend(output_failures)
    return ValidationReport(passed=not failures, tolerances=tolerances, samples=len(reference),
                            outputs=tuple(outputs), failures=tuple(failures))


def validate(
    reference: Runner,
    candidate: Runner,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    labels: np.ndarray | Sequence[np.ndarray] | None = None,
    class_outputs: Collection[str] | None = None,
    input_ranges: Mapping[str, InputRange] | None = None,
) -> ValidationReport:
    """Run both runners on every feed and compare their outputs with `compare_outputs`.

    `reference` runs the original model in fp32 (e.g. ONNX Runtime with graph optimizations
    disabled); `candidate` the optimized model or engine. The feeds may come at several input
    shapes: the report says which (`shapes`), with a verdict for each, and carries
    `input_ranges` (where the random feeds were drawn) to say so too.
    """
    return validate_against([reference.infer(feed) for feed in feeds], candidate, feeds,
                            tolerances, labels=labels, class_outputs=class_outputs,
                            input_ranges=input_ranges)


def validate_against(
    reference_outputs: Sequence[Mapping[str, np.ndarray]],
    candidate: Runner,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    labels: np.ndarray | Sequence[np.ndarray] | None = None,
    class_outputs: Collection[str] | None = None,
    input_ranges: Mapping[str, InputRange] | None = None,
) -> ValidationReport:
    """As `validate`, the reference's outputs on `feeds` given: the original's runner can then
    close before the candidate's opens, so a large model is never held twice."""
    candidate_outputs = [candidate.infer(feed) for feed in feeds]
    report = compare_outputs(reference_outputs, candidate_outputs, tolerances, labels=labels,
                             class_outputs=class_outputs)
    groups = _shape_groups(feeds)
    checks = []
    for shapes, indices in groups.items():
        passed = report.passed
        if len(groups) > 1:
            passed = compare_outputs(
                [reference_outputs[i] for i in indices], [candidate_outputs[i] for i in indices],
                tolerances, labels=None if labels is None else [labels[i] for i in indices],
                class_outputs=class_outputs).passed
        checks.append(ShapeCheck(dict(shapes), len(indices), passed))
    return replace(report, shapes=tuple(checks), input_ranges=dict(input_ranges or {}))


def with_inputs(report: ValidationReport, feeds: Sequence[Mapping[str, np.ndarray]],
                input_ranges: Mapping[str, InputRange] | None = None) -> ValidationReport:
    """`report` (made by other means than `validate`, e.g. a precision evaluation) saying the
    input shapes of `feeds` and the `input_ranges`; each shape gets the report's verdict."""
    shapes = tuple(ShapeCheck(dict(key), len(indices), report.passed)
                   for key, indices in _shape_groups(feeds).items())
    return replace(report, shapes=shapes, input_ranges=dict(input_ranges or {}))


def _shape_groups(feeds: Sequence[Mapping[str, np.ndarray]]
                  ) -> dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]]:
    # Feed indices by their input shapes, in order of first appearance.
    groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
    for index, feed in enumerate(feeds):
        key = tuple((name, tuple(int(d) for d in np.shape(array))) for name, array in feed.items())
        groups.setdefault(key, []).append(index)
    return groups


def _class_outputs(names: list[str], reference: Sequence[Mapping[str, np.ndarray]],
                   declared: Collection[str] | None) -> set[str]:
    if not reference:
        return set()
    first = reference[0]
    if declared is None:
        return {name for name in names if name in first and looks_like_class_scores(first[name])}
    for name in declared:
        if name not in names:
            raise DatasetError(f"Output {name!r} was named as class scores, but the model has "
                               f"no output of that name; its outputs are {_quoted(names)}.")
        shape = np.shape(first[name])
        if len(shape) == 0 or shape[-1] < 2:
            raise DatasetError(
                f"Output {name!r} was named as class scores, but its shape {list(shape)} has "
                "fewer than 2 classes on its last axis; name only outputs whose last axis "
                "holds one score per class.")
    return set(declared)


def _labelled_outputs(scored: set[str], reference: Sequence[Mapping[str, np.ndarray]],
                      labels: list[np.ndarray] | None) -> set[str]:
    if labels is None or not reference:
        return set()
    sizes = {np.size(label) for label in labels}

    def predictions(name: str) -> set[int]:
        return {int(np.size(sample[name]) // np.shape(sample[name])[-1]) for sample in reference}

    fitting = {name for name in scored if predictions(name) == sizes and len(sizes) == 1}
    if not fitting:
        found = ", ".join(f"{name!r} ({sorted(predictions(name))[0]} per sample)"
                          for name in sorted(scored)) or "none"
        raise DatasetError(
            f"The labels hold {sorted(sizes)} class id(s) per sample, which fits no output of "
            f"class scores (outputs with class scores: {found}); give one label per "
            "prediction, or name the class-score output explicitly.")
    return fitting


def _compare_output(
    name: str,
    references: list[np.ndarray],
    candidates: list[np.ndarray | None],
    tol: Tolerances,
    *,
    is_class: bool,
    labels: list[np.ndarray] | None,
) -> tuple[OutputComparison, list[MetricFailure]]:
    for ref, cand in zip(references, candidates, strict=True):
        if cand is None or np.shape(cand) != np.shape(ref):
            return _unmatched(name, ref, cand)
    present = [np.asarray(cand) for cand in candidates if cand is not None]
    errors = error_metrics(references, present)
    classes = class_metrics(references, present, labels) if is_class else None
    output = OutputComparison(name=name, passed=True, **asdict(errors),
                              **(asdict(classes) if classes else {}))
    output = _judged_by_scale(output, tol)
    failures = _dtype_failures(name, references[0], present[0])
    failures += _elementwise_failures(name, references, present, tol)
    failures += _non_finite_failures(output)
    failures += _limit_failures(output, tol)
    return replace(output, passed=not failures), failures


def _judged_by_scale(output: OutputComparison, tol: Tolerances) -> OutputComparison:
    """`output` with the scale-relative limits it is not judged by on a near-zero reference
    (RMS at or below a finite atol), and why."""
    if not math.isfinite(tol.atol) or output.reference_rms > tol.atol:
        return output
    limits = {metric: getattr(tol, limit) for limit, metric, _, _ in _LIMITS}
    skipped = tuple(metric for metric in SCALE_RELATIVE_METRICS if limits[metric] is not None)
    if not skipped:
        return output
    labels = ", ".join(_LABELS[metric] for metric in skipped)
    why = (f"{labels} not judged: the reference's RMS {output.reference_rms:.3g} is at or "
           f"below atol={tol.atol:g}, so the output is near zero and only the elementwise "
           "test |c - r| <= atol + rtol*|r| judges it (the cosine of near-zero vectors "
           f"measures rounding noise; here {output.cosine_similarity:.6f} with max |error| "
           f"{output.max_abs_err:.3g})")
    return replace(output, not_judged=skipped, not_judged_why=why)


def _unmatched(name: str, ref: np.ndarray,
               cand: np.ndarray | None) -> tuple[OutputComparison, list[MetricFailure]]:
    output = OutputComparison(
        name=name, max_abs_err=math.inf, max_rel_err=math.inf, mean_abs_err=math.inf,
        cosine_similarity=math.nan, passed=False, rmse=math.inf, snr_db=-math.inf,
        abs_err_p50=math.inf, abs_err_p90=math.inf, abs_err_p99=math.inf)
    if cand is None:
        failure = MetricFailure(
            output=name, metric="missing", value="missing", limit="present", excess=None,
            message=f"output {name!r} is missing from the candidate's outputs")
    else:
        found, wanted = list(np.shape(cand)), list(np.shape(ref))
        failure = MetricFailure(
            output=name, metric="shape", value=str(found), limit=str(wanted), excess=None,
            message=f"output {name!r} has shape {found}, but the reference's is {wanted}")
    return output, [failure]


def _dtype_failures(name: str, ref: np.ndarray, cand: np.ndarray) -> list[MetricFailure]:
    if np.asarray(ref).dtype == cand.dtype:
        return []
    found, wanted = cand.dtype.name, np.asarray(ref).dtype.name
    return [MetricFailure(
        output=name, metric="dtype", value=found, limit=wanted, excess=None,
        message=f"output {name!r} is {found}, but the reference's is {wanted}; keep the "
                "graph outputs in their original type")]


def _elementwise_failures(name: str, references: list[np.ndarray], candidates: list[np.ndarray],
                          tol: Tolerances) -> list[MetricFailure]:
    excess = tolerance_excess(references, candidates, tol.atol, tol.rtol)
    if not excess.outside:
        return []
    share = excess.outside / excess.elements
    if math.isinf(excess.worst_ratio):
        worst = f"the worst is {excess.worst_abs_err:.3g} off a reference of " \
                f"{excess.worst_reference:.3g} (NaN or infinity on one side only)"
    else:
        worst = f"the worst, |error| {excess.worst_abs_err:.3g} at reference " \
                f"{excess.worst_reference:.3g}, is {excess.worst_ratio:.3g}x its allowance"
    return [MetricFailure(
        output=name, metric="elementwise", value=excess.worst_ratio, limit=1.0,
        excess=excess.worst_ratio - 1.0,
        message=f"output {name!r}: {excess.outside} of {excess.elements} elements "
                f"({share:.2%}) differ by more than atol + rtol*|reference| "
                f"(atol={tol.atol:g}, rtol={tol.rtol:g}); {worst}")]


def _non_finite_failures(output: OutputComparison) -> list[MetricFailure]:
    failures = []
    for kind in ("nan", "inf"):
        found = getattr(output, f"candidate_{kind}_count")
        allowed = getattr(output, f"reference_{kind}_count")
        if found > allowed:
            shown = "NaN" if kind == "nan" else "infinite"
            failures.append(MetricFailure(
                output=output.name, metric=f"candidate_{kind}_count", value=found,
                limit=allowed, excess=found - allowed,
                message=f"output {output.name!r} has {found} {shown} values where the "
                        f"reference has {allowed} (overflow in a lower precision?)"))
    return failures


Direction = Literal["min", "max"]

# (Tolerances field, OutputComparison field, which side of the limit passes, how to show it)
_LIMITS: tuple[tuple[str, str, Direction, str], ...] = (
    ("min_cosine", "cosine_similarity", "min", "cosine similarity"),
    ("max_rel_err", "max_rel_err", "max", "max relative error"),
    ("max_rmse", "rmse", "max", "RMSE"),
    ("min_snr_db", "snr_db", "min", "SNR"),
    ("min_top1_agreement", "top1_agreement", "min", "top-1 agreement"),
    ("min_top5_agreement", "top5_agreement", "min", "top-5 agreement"),
    ("max_accuracy_drop", "accuracy_drop", "max", "accuracy drop"),
)


_LABELS = {metric: label for _, metric, _, label in _LIMITS}
# The Tolerances fields a failed metric's limit comes from.
_LIMIT_NAMES: dict[str, tuple[str, ...]] = {
    "elementwise": ("atol", "rtol"), **{metric: (limit,) for limit, metric, _, _ in _LIMITS}}


def _limit_failures(output: OutputComparison, tol: Tolerances) -> list[MetricFailure]:
    failures = []
    for limit_name, metric, direction, label in _LIMITS:
        limit = getattr(tol, limit_name)
        value = getattr(output, metric)
        if limit is None or value is None or metric in output.not_judged:
            continue  # not asked for, not measured for this output (not class scores), or
            # a scale-relative limit on a near-zero output
        ok = value >= limit if direction == "min" else value <= limit
        if ok:
            continue
        excess = limit - value if direction == "min" else value - limit
        if math.isnan(excess):
            excess = math.inf
        side = "below the minimum" if direction == "min" else "above the maximum"
        failures.append(MetricFailure(
            output=output.name, metric=metric, value=value, limit=limit, excess=excess,
            message=f"output {output.name!r}: {label} {_show(metric, value)} is {side} "
                    f"{_show(metric, limit)} by {_show_excess(metric, excess)}"
                    + _accuracy_note(metric, output) + _scale_note(metric, output)))
    return failures


def _show(metric: str, value: float) -> str:
    if metric in ("top1_agreement", "top5_agreement"):
        return f"{value:.2%}"
    if metric == "accuracy_drop":
        return f"{value * 100:.2f} points"
    if metric == "snr_db":
        return f"{value:.1f} dB"
    if metric == "cosine_similarity":
        return f"{value:.6f}"
    return f"{value:.3g}"


def _show_excess(metric: str, excess: float) -> str:
    if metric in ("top1_agreement", "top5_agreement"):
        return f"{excess * 100:.2f} points"
    return _show(metric, excess)


def _accuracy_note(metric: str, output: OutputComparison) -> str:
    if metric != "accuracy_drop" or output.reference_accuracy is None \
            or output.candidate_accuracy is None:
        return ""
    return (f" (accuracy {output.reference_accuracy:.2%} for the original, "
            f"{output.candidate_accuracy:.2%} for the candidate)")


def _scale_note(metric: str, output: OutputComparison) -> str:
    if metric not in SCALE_RELATIVE_METRICS or not math.isfinite(output.reference_rms):
        return ""
    return (f" (reference RMS {output.reference_rms:.3g}, max |error| "
            f"{output.max_abs_err:.3g})")


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names) or "none"

