"""Measure how far a candidate output is from the reference's, as plain numbers.

Everything is computed in float64 over all samples of one output together. An element counts
as no error where candidate and reference are equal, including matching NaNs and equal
infinities; any other NaN or infinity is an infinite error.

Relative error is |c - r| / max(|r|, floor) with floor = REL_ERR_FLOOR * RMS(r) (the RMS of the
reference's finite elements, over all samples). An element a thousand times smaller than the
output's typical magnitude is thus measured against that thousandth, not against itself, so
a reference of 1e-9 next to values near 1 cannot turn a harmless 1e-7 error into 100.
An all-zero reference has no scale: its floor is 1 and relative error equals absolute error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "REL_ERR_FLOOR",
    "TOP_K",
    "ClassMetrics",
    "ErrorMetrics",
    "ToleranceExcess",
    "class_metrics",
    "error_metrics",
    "is_float_dtype",
    "looks_like_class_scores",
    "tolerance_excess",
]

REL_ERR_FLOOR = 1e-3  # fraction of the reference's RMS below which |r| stops shrinking
TOP_K = 5
_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class ErrorMetrics:
    """Error statistics of one output; the same field names appear in `OutputComparison`."""

    max_abs_err: float
    max_rel_err: float
    mean_abs_err: float
    rmse: float
    snr_db: float  # 10·log10(Σr² / Σ(c - r)²): +inf for no error, -inf for infinite error
    cosine_similarity: float  # over the elements finite in both
    abs_err_p50: float  # percentiles of |c - r| over every element (order statistics)
    abs_err_p90: float
    abs_err_p99: float
    reference_nan_count: int
    reference_inf_count: int
    candidate_nan_count: int
    candidate_inf_count: int
    reference_rms: float = 0.0  # RMS of the reference's finite elements: the output's scale


@dataclass(frozen=True)
class ClassMetrics:
    """Agreement of class predictions (argmax over the last axis), and accuracy with labels.

    Top-k agreement is the fraction of predictions whose candidate top-k classes include the
    reference's top-1 class; top-5 is None when there are 5 classes or fewer (it would be 1).
    Accuracies are fractions of predictions equal to the label; `accuracy_drop` is the
    reference's accuracy minus the candidate's (0.02: the candidate lost two points).
    """

    top1_agreement: float
    top5_agreement: float | None
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None
    accuracy_drop: float | None = None


@dataclass(frozen=True)
class ToleranceExcess:
    """Which elements break |c - r| <= atol + rtol·|r| (np.allclose with equal_nan), and the worst."""

    elements: int
    outside: int
    worst_ratio: float  # max |c - r| / (atol + rtol·|r|); inf for a NaN/inf the reference lacks
    worst_abs_err: float  # at the worst element
    worst_reference: float  # the reference value there


def error_metrics(references: Sequence[np.ndarray],
                  candidates: Sequence[np.ndarray]) -> ErrorMetrics:
    """Error statistics of candidate against reference, pairs of equal shape, one per sample.

    >>> error_metrics([np.array([1.0, 2.0])], [np.array([1.0, 2.5])]).max_abs_err
    0.5
    """
    pairs = [(_float64(r), _float64(c)) for r, c in zip(references, candidates, strict=True)]
    floor = _relative_floor([r for r, _ in pairs])
    errors = []
    max_rel = total_abs = total_sq = signal = 0.0
    dot = ref_norm2 = cand_norm2 = 0.0
    finite_count = 0
    nan_ref = inf_ref = nan_cand = inf_cand = 0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for ref, cand in pairs:
            err = abs_error(ref, cand)
            errors.append(err.ravel())
            rel = np.where(err == 0.0, 0.0, err / np.maximum(np.abs(ref), floor))
            max_rel = max(max_rel, float(np.max(np.where(np.isnan(rel), math.inf, rel),
                                                initial=0.0)))
            total_abs += float(np.sum(err))
            total_sq += float(np.sum(err * err))
            finite_ref = np.isfinite(ref)
            signal += float(np.sum(ref[finite_ref] ** 2))
            finite_count += int(np.count_nonzero(finite_ref))
            both = finite_ref & np.isfinite(cand)
            dot += float(np.sum(ref[both] * cand[both]))
            ref_norm2 += float(np.sum(ref[both] ** 2))
            cand_norm2 += float(np.sum(cand[both] ** 2))
            nan_ref += int(np.count_nonzero(np.isnan(ref)))
            inf_ref += int(np.count_nonzero(np.isinf(ref)))
            nan_cand += int(np.count_nonzero(np.isnan(cand)))
            inf_cand += int(np.count_nonzero(np.isinf(cand)))
    all_errors = np.concatenate(errors) if errors else np.zeros(0)
    count = all_errors.size
    p50, p90, p99 = _percentiles(all_errors)
    return ErrorMetrics(
        max_abs_err=float(np.max(all_errors, initial=0.0)),
        max_rel_err=max_rel,
        mean_abs_err=total_abs / count if count else 0.0,
        rmse=math.sqrt(total_sq / count) if count else 0.0,
        snr_db=_snr_db(signal, total_sq),
        cosine_similarity=_cosine(dot, ref_norm2, cand_norm2),
        abs_err_p50=p50,
        abs_err_p90=p90,
        abs_err_p99=p99,
        reference_nan_count=nan_ref,
        reference_inf_count=inf_ref,
        candidate_nan_count=nan_cand,
        candidate_inf_count=inf_cand,
        reference_rms=math.sqrt(signal / finite_count) if finite_count else 0.0,
    )


def abs_error(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """|cand - ref| in float64: 0 where equal (matching NaNs, equal infinities), else inf for NaN."""
    ref, cand = _float64(ref), _float64(cand)
    with np.errstate(invalid="ignore", over="ignore"):
        equal = (ref == cand) | (np.isnan(ref) & np.isnan(cand))
        err = np.where(equal, 0.0, np.abs(cand - ref))
    return np.where(np.isnan(err), math.inf, err)


def tolerance_excess(references: Sequence[np.ndarray], candidates: Sequence[np.ndarray],
                     atol: float, rtol: float) -> ToleranceExcess:
    """Count the elements outside atol + rtol·|r| and find the worst one.

    Agrees with np.allclose(c, r, atol, rtol, equal_nan=True): where the reference is NaN or
    infinite, only an identical candidate value is inside.
    """
    elements = outside = 0
    worst = (0.0, 0.0, 0.0)  # ratio, |error|, reference
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for ref_in, cand_in in zip(references, candidates, strict=True):
            ref = _float64(ref_in).ravel()
            err = abs_error(ref_in, cand_in).ravel()
            allowance = atol + rtol * np.abs(ref)
            finite_ref = np.isfinite(ref)
            bad = np.where(finite_ref, err > allowance, err > 0.0)
            ratio = np.where(err == 0.0, 0.0,
                             np.where(finite_ref, err / allowance, math.inf))
            ratio = np.where(np.isnan(ratio), math.inf, ratio)
            elements += ref.size
            outside += int(np.count_nonzero(bad))
            if ref.size:
                at = int(np.argmax(ratio))
                if ratio[at] > worst[0]:
                    worst = (float(ratio[at]), float(err[at]), float(ref[at]))
    return ToleranceExcess(elements=elements, outside=outside, worst_ratio=worst[0],
                           worst_abs_err=worst[1], worst_reference=worst[2])


def class_metrics(references: Sequence[np.ndarray], candidates: Sequence[np.ndarray],
                  labels: Sequence[np.ndarray] | None = None) -> ClassMetrics:
    """Top-1/top-5 agreement of class scores (classes on the last axis), and accuracy vs labels.

    Each row of the leading axes is one prediction, e.g. [batch, classes] gives `batch` of them
    per sample and [batch, tokens, vocab] gives batch·tokens. `labels`, one array per sample,
    holds as many class ids as that sample has predictions (any shape of that size); a label
    outside [0, classes) matches neither model.

    Raises:
        ValueError: scores with fewer than 2 classes, or labels whose size does not fit
            (callers check both first and raise an error that names the output).
    """
    classes = int(np.shape(references[0])[-1]) if references and np.ndim(references[0]) else 0
    if classes < 2:
        raise ValueError(f"class scores need >= 2 classes on the last axis, got {classes}")
    ref_rows = np.concatenate([_rows(r, classes) for r in references])
    cand_rows = np.concatenate([_rows(c, classes) for c in candidates])
    ref_top1 = np.argmax(ref_rows, axis=1)
    cand_top1 = np.argmax(cand_rows, axis=1)
    top5 = None
    if classes > TOP_K:
        # NaN scores sort last under argpartition, so a NaN class is never in the top k.
        cand_topk = np.argpartition(-cand_rows, TOP_K - 1, axis=1)[:, :TOP_K]
        top5 = float(np.mean(np.any(cand_topk == ref_top1[:, None], axis=1)))
    metrics = ClassMetrics(top1_agreement=float(np.mean(cand_top1 == ref_top1)),
                           top5_agreement=top5)
    if labels is None:
        return metrics
    flat = np.concatenate([np.asarray(label).ravel() for label in labels])
    if flat.size != ref_top1.size:
        raise ValueError(f"{flat.size} labels for {ref_top1.size} predictions")
    reference_accuracy = float(np.mean(ref_top1 == flat))
    candidate_accuracy = float(np.mean(cand_top1 == flat))
    return ClassMetrics(top1_agreement=metrics.top1_agreement,
                        top5_agreement=metrics.top5_agreement,
                        reference_accuracy=reference_accuracy,
                        candidate_accuracy=candidate_accuracy,
                        accuracy_drop=reference_accuracy - candidate_accuracy)


def looks_like_class_scores(array: np.ndarray) -> bool:
    """Float [batch, classes >= 2]: the shape of a classifier's logits or probabilities."""
    return np.ndim(array) == 2 and np.shape(array)[1] >= 2 and is_float_dtype(array.dtype)


def is_float_dtype(dtype: np.dtype) -> bool:
    """numpy floats, and ml_dtypes' bfloat16/float8 (kind "V", named float*/bfloat*)."""
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")))


def _rows(array: np.ndarray, classes: int) -> np.ndarray:
    return _float64(array).reshape(-1, classes)


def _float64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64, copy=False)


def _relative_floor(references: Sequence[np.ndarray]) -> float:
    total, count = 0.0, 0
    for ref in references:
        finite = ref[np.isfinite(ref)]
        total += float(np.sum(finite * finite))
        count += finite.size
    rms = math.sqrt(total / count) if count else 0.0
    return REL_ERR_FLOOR * rms if rms > 0.0 else 1.0


def _percentiles(errors: np.ndarray) -> tuple[float, float, float]:
    if errors.size == 0:
        return 0.0, 0.0, 0.0
    # An order statistic (no interpolation), so an infinite error cannot turn into NaN.
    p50, p90, p99 = np.percentile(errors, _PERCENTILES, method="inverted_cdf")
    return float(p50), float(p90), float(p99)


def _snr_db(signal: float, noise: float) -> float:
    if noise == 0.0:
        return math.inf
    if signal == 0.0 or math.isinf(noise):
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _cosine(dot: float, ref_norm2: float, cand_norm2: float) -> float:
    if ref_norm2 == 0.0 and cand_norm2 == 0.0:
        return 1.0  # two all-zero outputs agree perfectly
    if ref_norm2 == 0.0 or cand_norm2 == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / math.sqrt(ref_norm2 * cand_norm2)))
