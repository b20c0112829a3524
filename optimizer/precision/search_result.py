"""What a precision search is asked for and what it found: the accuracy budget and the result.

`AccuracyBudget` states the limits on the worst output; `PrecisionSearchResult` holds the
conversion found (`model`), the nodes it keeps in float32 beyond the keep policy with what was
measured for each, the accuracy reached and the search's cost, as strict JSON for a job record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

from optimizer.jsonable import json_safe
from optimizer.precision.convert import PrecisionReport
from optimizer.validation.compare import MetricFailure, ValidationReport
from optimizer.validation.tolerances import Tolerances

__all__ = [
    "NON_FINITE_METRICS",
    "AccuracyBudget",
    "AccuracyReached",
    "KeptFp32Node",
    "PrecisionSearchResult",
]

NON_FINITE_METRICS = ("candidate_nan_count", "candidate_inf_count")
_BROKEN_OUTPUT = (*NON_FINITE_METRICS, "missing", "shape", "dtype")


@dataclass(frozen=True)
class AccuracyBudget:
    """What a converted model must reach on its worst output; at least one limit is set.

    `min_cosine` and `min_top1_agreement` are lower limits (agreement as a fraction: 0.99 is
    99%, over outputs holding class scores [batch, classes]); `max_abs_err` an upper one. As
    `Tolerances`: atol = max_abs_err with rtol 0, the cosine floor, the top-1 floor.

    Raises:
        ValueError: no limit set, or a limit that is not a finite number in its range.
    """

    min_cosine: float | None = None
    min_top1_agreement: float | None = None
    max_abs_err: float | None = None

    def __post_init__(self) -> None:
        limits = {"min_cosine": (-1.0, 1.0), "min_top1_agreement": (0.0, 1.0),
                  "max_abs_err": (0.0, math.inf)}
        if all(getattr(self, name) is None for name in limits):
            raise ValueError("An accuracy budget needs at least one of min_cosine, "
                             "min_top1_agreement or max_abs_err; got none.")
        for name, (low, high) in limits.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"Accuracy budget {name} must be a finite number in "
                                 f"[{low:g}, {high:g}], got {value!r}.")

    def tolerances(self) -> Tolerances:
        """The budget as `compare_outputs` limits (unset limits do not constrain)."""
        return Tolerances(
            atol=self.max_abs_err if self.max_abs_err is not None else math.inf, rtol=0.0,
            min_cosine=self.min_cosine if self.min_cosine is not None else -1.0,
            min_top1_agreement=self.min_top1_agreement)

    def describe(self) -> str:
        parts = []
        if self.min_cosine is not None:
            parts.append(f"cosine >= {self.min_cosine!r}")
        if self.min_top1_agreement is not None:
            parts.append(f"top-1 agreement >= {self.min_top1_agreement:.2%}")
        if self.max_abs_err is not None:
            parts.append(f"max abs error <= {self.max_abs_err!r}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)


@dataclass(frozen=True)
class AccuracyReached:
    """The worst output's accuracy: lowest cosine, lowest top-1 agreement (None without class
    scores), largest absolute error."""

    cosine: float  # NaN when an output is missing or misshapen
    top1_agreement: float | None
    max_abs_err: float

    @classmethod
    def of(cls, report: ValidationReport) -> AccuracyReached:
        outputs = report.outputs
        agreements = [o.top1_agreement for o in outputs if o.top1_agreement is not None]
        cosines = [o.cosine_similarity for o in outputs]
        return cls(
            cosine=math.nan if any(math.isnan(c) for c in cosines) else min(cosines, default=1.0),
            top1_agreement=min(agreements) if agreements else None,
            max_abs_err=max((o.max_abs_err for o in outputs), default=0.0))

    def describe(self) -> str:
        top1 = f", top-1 agreement {self.top1_agreement:.2%}" \
            if self.top1_agreement is not None else ""
        return f"cosine {self.cosine:.8f}{top1}, max abs error {self.max_abs_err:.3g}"

    def to_dict(self) -> dict[str, float | None]:
        safe: dict[str, float | None] = json_safe(asdict(self))
        return safe


@dataclass(frozen=True)
class KeptFp32Node:
    """A node the search keeps in float32 beyond the keep policy, and what it measured."""

    name: str
    op_type: str
    sensitivity: float  # relative error it (or its unit) added when measured; inf: overflow
    reason: str

    def to_dict(self) -> dict[str, Any]:
        safe: dict[str, Any] = json_safe(asdict(self))
        return safe


@dataclass(frozen=True)
class PrecisionSearchResult:
    """What `search_precision` found: the conversion, how accurate it is, and what it cost.

    `kept_fp32_nodes` are the nodes kept beyond the policy (pass their names as
    `extra_fp32_nodes` to reproduce `model`); `default_kept` counts the nodes the policy alone
    keeps, `converted` the nodes computing in the low type in `model`. `failures` are the budget
    limits `model` still breaks (empty when within budget).
    """

    precision: str
    budget: AccuracyBudget
    within_budget: bool
    kept_fp32_nodes: tuple[KeptFp32Node, ...]
    default_kept: int
    converted: int
    accuracy: AccuracyReached
    evaluations: int
    sensitivity_passes: int
    max_evaluations: int
    seconds: float
    report: PrecisionReport
    failures: tuple[MetricFailure, ...]
    model: onnx.ModelProto = field(repr=False, compare=False)

    def describe(self) -> str:
        """One or two sentences for a job record or the CLI."""
        names = ", ".join(repr(node.name) for node in self.kept_fp32_nodes[:8])
        more = len(self.kept_fp32_nodes) - 8
        kept = (f"keeping {len(self.kept_fp32_nodes)} node(s) in float32 beyond the "
                f"{self.default_kept} the keep-list keeps ({names}"
                f"{f' and {more} more' if more > 0 else ''})" if self.kept_fp32_nodes
                else f"with the keep-list alone ({self.default_kept} node(s) in float32)")
        cost = f"{self.evaluations} of {self.max_evaluations} evaluations"
        if self.within_budget:
            return (f"{self.precision} meets the budget ({self.budget.describe()}) {kept}: "
                    f"{self.accuracy.describe()}, after {cost}.")
        broken = "; ".join(self._shortfalls())
        return (f"No {self.precision} conversion within the budget ({self.budget.describe()}) "
                f"was found in {cost}; the closest, {kept}, reaches {self.accuracy.describe()}, "
                f"missing {broken}. Loosen the budget, allow more evaluations, or build in "
                "float32.")

    def _shortfalls(self) -> list[str]:
        """Each budget limit missed, and any output that broke (NaN, inf, shape)."""
        reached, budget, words = self.accuracy, self.budget, []
        if budget.min_cosine is not None and not reached.cosine >= budget.min_cosine:
            words.append(f"cosine >= {budget.min_cosine!r}")
        if budget.min_top1_agreement is not None and reached.top1_agreement is not None \
                and reached.top1_agreement < budget.min_top1_agreement:
            words.append(f"top-1 agreement >= {budget.min_top1_agreement:.2%}")
        if budget.max_abs_err is not None and not reached.max_abs_err <= budget.max_abs_err:
            words.append(f"max abs error <= {budget.max_abs_err!r}")
        return words + [failure.message for failure in self.failures
                        if failure.metric in _BROKEN_OUTPUT]

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON for the job record (the model itself is left out)."""
        return {
            "precision": self.precision,
            "budget": self.budget.to_dict(),
            "within_budget": self.within_budget,
            "kept_fp32_nodes": [node.to_dict() for node in self.kept_fp32_nodes],
            "default_kept": self.default_kept,
            "converted": self.converted,
            "accuracy": self.accuracy.to_dict(),
            "evaluations": self.evaluations,
            "sensitivity_passes": self.sensitivity_passes,
            "max_evaluations": self.max_evaluations,
            "seconds": self.seconds,
            "failures": [failure.to_dict() for failure in self.failures],
            "summary": self.describe(),
            "report": self.report.to_dict(),
        }
