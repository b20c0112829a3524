"""Decide whether an optimized model's outputs match the original's within stated tolerances."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from optimizer.errors import AccuracyMismatchError, InternalError
from optimizer.runner import Runner

__all__ = [
    "OutputComparison",
    "Tolerances",
    "ValidationReport",
    "compare_outputs",
    "default_tolerances",
    "validate",
]


@dataclass(frozen=True)
class Tolerances:
    """Elementwise |candidate - reference| <= atol + rtol * |reference|, and a cosine floor."""

    atol: float
    rtol: float
    min_cosine: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


_DEFAULT_TOLERANCES = {
    "fp32": Tolerances(atol=1e-4, rtol=1e-3, min_cosine=0.9999),
    "fp16": Tolerances(atol=1e-2, rtol=1e-2, min_cosine=0.999),
    "bf16": Tolerances(atol=5e-2, rtol=5e-2, min_cosine=0.995),
}


def default_tolerances(precision: str) -> Tolerances:
    """The tolerances for an engine built at `precision` ("fp32", "fp16" or "bf16").

    Raises:
        ValueError: any other precision.
    """
    try:
        return _DEFAULT_TOLERANCES[precision]
    except KeyError:
        raise ValueError(
            f"No default tolerances for precision {precision!r}; expected one of "
            f"{', '.join(_DEFAULT_TOLERANCES)}.") from None


@dataclass(frozen=True)
class OutputComparison:
    """How one output differs from the reference, over all samples together."""

    name: str
    max_abs_err: float
    max_rel_err: float
    mean_abs_err: float
    cosine_similarity: float  # NaN when the output is missing or its shape differs
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON dict: non-finite numbers become None (PostgreSQL JSON rejects them)."""
        return {key: _json_number(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class ValidationReport:
    passed: bool
    tolerances: Tolerances
    samples: int
    outputs: tuple[OutputComparison, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tolerances": self.tolerances.to_dict(),
            "samples": self.samples,
            "outputs": [output.to_dict() for output in self.outputs],
        }

    def raise_if_failed(self, subject: str) -> None:
        """Raise AccuracyMismatchError naming each failing output of `subject` (e.g. a job).

        >>> report.raise_if_failed("engine for job 42")        # doctest: +SKIP
        """
        if self.passed:
            return
        failed = [output for output in self.outputs if not output.passed]
        details = "; ".join(
            f"output {o.name!r}: max abs error {o.max_abs_err:.3g}, max rel error "
            f"{o.max_rel_err:.3g}, cosine {o.cosine_similarity:.6f}" for o in failed)
        tol = self.tolerances
        raise AccuracyMismatchError(
            f"The outputs of {subject} differ from the original model beyond tolerance "
            f"(atol={tol.atol:g}, rtol={tol.rtol:g}, min cosine={tol.min_cosine:g}) over "
            f"{self.samples} samples: {details}. Build at a higher precision or loosen the "
            "tolerances.")


def compare_outputs(
    reference: Sequence[Mapping[str, np.ndarray]],
    candidate: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
) -> ValidationReport:
    """Compare each reference output with the candidate's, sample by sample.

    An output passes when shapes and dtypes match, every element satisfies
    |c - r| <= atol + rtol * |r| (NaN only where the reference has NaN, infinities equal), and
    the cosine similarity over all samples is at least `min_cosine`. A missing output or a
    shape mismatch fails with infinite errors rather than raising.

    Raises:
        InternalError: the two sequences hold different numbers of samples.
    """
    if len(reference) != len(candidate):
        raise InternalError(
            f"compare_outputs got {len(reference)} reference samples but {len(candidate)} "
            "candidate samples; run both on the same feeds.")
    names = list(dict.fromkeys(name for sample in reference for name in sample))
    outputs = tuple(
        _compare_output(name, [sample[name] for sample in reference],
                        [sample.get(name) for sample in candidate], tolerances)
        for name in names)
    return ValidationReport(passed=all(output.passed for output in outputs),
                            tolerances=tolerances, samples=len(reference), outputs=outputs)


def validate(
    reference: Runner,
    candidate: Runner,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
) -> ValidationReport:
    """Run both runners on every feed and compare their outputs with `compare_outputs`."""
    reference_outputs = [reference.infer(feed) for feed in feeds]
    candidate_outputs = [candidate.infer(feed) for feed in feeds]
    return compare_outputs(reference_outputs, candidate_outputs, tolerances)


def _compare_output(name: str, references: list[np.ndarray], candidates: list[np.ndarray | None],
                    tol: Tolerances) -> OutputComparison:
    pairs = []
    for ref, cand in zip(references, candidates, strict=True):
        if cand is None or np.shape(cand) != np.shape(ref):
            return OutputComparison(name=name, max_abs_err=math.inf, max_rel_err=math.inf,
                                    mean_abs_err=math.inf, cosine_similarity=math.nan,
                                    passed=False)
        pairs.append((np.asarray(ref), np.asarray(cand)))
    same_dtype = all(ref.dtype == cand.dtype for ref, cand in pairs)
    as_f64 = [(ref.astype(np.float64), cand.astype(np.float64)) for ref, cand in pairs]
    # A relative error against an exact zero is meaningless; measure it against a floor set
    # by the output's scale instead.
    scale = max((float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)) for r, _ in as_f64),
                default=0.0)
    floor = max(1e-6 * scale, 1e-12)
    max_abs = max_rel = total_abs = 0.0
    count = 0
    dot = ref_norm2 = cand_norm2 = 0.0
    all_close = True
    with np.errstate(invalid="ignore", over="ignore"):
        for ref, cand in as_f64:
            # Matching NaNs and equal infinities count as no error.
            equal = (ref == cand) | (np.isnan(ref) & np.isnan(cand))
            abs_err = np.nan_to_num(np.where(equal, 0.0, np.abs(cand - ref)), nan=math.inf)
            rel_err = np.nan_to_num(abs_err / np.maximum(np.abs(ref), floor), nan=math.inf)
            max_abs = max(max_abs, float(np.max(abs_err, initial=0.0)))
            max_rel = max(max_rel, float(np.max(rel_err, initial=0.0)))
            total_abs += float(np.sum(abs_err))
            count += abs_err.size
            # allclose also fails a NaN or infinity where the reference is finite.
            all_close &= bool(np.allclose(cand, ref, atol=tol.atol, rtol=tol.rtol, equal_nan=True))
            finite = np.isfinite(ref) & np.isfinite(cand)
            dot += float(np.sum(ref[finite] * cand[finite]))
            ref_norm2 += float(np.sum(ref[finite] ** 2))
            cand_norm2 += float(np.sum(cand[finite] ** 2))
    cosine = _cosine(dot, ref_norm2, cand_norm2)
    return OutputComparison(
        name=name,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        mean_abs_err=total_abs / count if count else 0.0,
        cosine_similarity=cosine,
        passed=same_dtype and all_close and cosine >= tol.min_cosine,
    )


def _cosine(dot: float, ref_norm2: float, cand_norm2: float) -> float:
    if ref_norm2 == 0.0 and cand_norm2 == 0.0:
        return 1.0  # two all-zero outputs agree perfectly
    if ref_norm2 == 0.0 or cand_norm2 == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / math.sqrt(ref_norm2 * cand_norm2)))


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
