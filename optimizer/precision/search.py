"""Search for the fewest nodes to keep in float32 that bring a float16/bfloat16 model within budget.

The reference is the float32 original, run once. The default conversion (the keep policy alone)
is evaluated first; when it meets the budget nothing more is kept. Otherwise, in rounds:

1. measure the current conversion's per-node sensitivity in one pass (`sensitivity.py`: the
   error each node adds, tensor by tensor against the original), giving units of nodes ranked
   most sensitive first;
2. keep growing prefixes of that ranking in float32 (1, 2, 4, 8... units, each a full accuracy
   evaluation) until one meets the budget, then bisect between the last prefix that failed and
   the first that passed for the shortest: O(log n) evaluations for n units, assuming more
   float32 never hurts;
3. when no prefix meets it, continue from the closest prefix (the smallest budget deficit) with
   a fresh measurement, since keeping nodes changes where the error comes from (an overflow
   moves to the next reader; an amplified rounding moves one producer up).

Finally, while evaluations remain, a backward pass tries dropping each kept node (a range unit
as a whole), least sensitive first, and drops it when the budget still holds. Every model run
counts against `max_evaluations`: accuracy evaluations and sensitivity measurements alike.

The search never keeps every node in float32: a conversion with nothing left in low precision
is not a candidate, so an unreachable budget ends with `within_budget` False and the closest
conversion found. Accuracy is judged as `evaluate_precision` judges it (the CPU emulation), on
the caller's feeds: the budget holds for them, not for every input.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from optimizer.model.tensor_specs import numpy_dtype, summarize_model
from optimizer.precision.convert import LOW_DTYPES, Precision, convert_precision
from optimizer.precision.evaluate import evaluate_precision, run_outputs
from optimizer.precision.keep_list import DEFAULT_KEEP, KeepPolicy
from optimizer.precision.search_result import (
    NON_FINITE_METRICS,
    AccuracyBudget,
    AccuracyReached,
    KeptFp32Node,
    PrecisionSearchResult,
)
from optimizer.precision.sensitivity import SensitivityProbe, SensitivityUnit
from optimizer.validation.compare import ValidationReport
from optimizer.validation.metrics import looks_like_class_scores

__all__ = ["search_precision"]

_MAX_ROUNDS = 8


def search_precision(
    model: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    *,
    precision: Precision,
    budget: AccuracyBudget,
    max_evaluations: int = 64,
    keep_fp32: KeepPolicy = DEFAULT_KEEP,
) -> PrecisionSearchResult:
    """Convert `model` to `precision`, keeping the fewest extra nodes in float32 that meet
    `budget` on `feeds` (see the module doc for how, and what counts as an evaluation).

    >>> result = search_precision(model, feeds, precision="bf16",
    ...                           budget=AccuracyBudget(min_cosine=0.9999))  # doctest: +SKIP
    >>> result.within_budget, [n.name for n in result.kept_fp32_nodes]      # doctest: +SKIP

    Raises:
        ValueError: an unknown precision, no feeds, `max_evaluations` < 1, or a top-1 budget
            for a model with no output of class scores ([batch, classes]).
        EngineBuildError, InferenceError: onnxruntime cannot load or run a model.
    """
    if precision not in LOW_DTYPES:
        raise ValueError(f"Cannot search precision {precision!r}; expected one of "
                         f"{', '.join(LOW_DTYPES)}.")
    if max_evaluations < 1:
        raise ValueError(f"max_evaluations must be at least 1 (the default conversion is "
                         f"always evaluated), got {max_evaluations}.")
    dtypes = {spec.name: numpy_dtype(spec.dtype) for spec in summarize_model(model).inputs}
    # The sensitivity pass feeds onnxruntime directly, which takes only the declared types.
    feeds = [{name: np.asarray(array).astype(dtypes.get(name, np.asarray(array).dtype),
                                             copy=False) for name, array in feed.items()}
             for feed in feeds]
    if not feeds:
        raise ValueError(f"search_precision needs at least one feed to measure model "
                         f"{model.graph.name!r} on; got none.")
    started = time.perf_counter()
    reference = run_outputs(model, feeds)
    _check_top1(budget, reference, model.graph.name)
    with tempfile.TemporaryDirectory(prefix="fuseforge-precision-search-") as folder:
        search = _Search(model, feeds, reference, precision, budget, keep_fp32,
                         max_evaluations, Path(folder))
        chosen = search.run()
    converted, report = convert_precision(model, precision, keep_fp32=keep_fp32,
                                          extra_fp32_nodes=chosen.extra)
    assert chosen.validation is not None  # the search never chooses a conversion-free trial
    op_types = {node.name: node.op_type for node in report.kept}
    kept = tuple(search.kept_node(name, op_types.get(name, "")) for name in
                 sorted(chosen.extra, key=search.rank))
    return PrecisionSearchResult(
        precision=precision, budget=budget, within_budget=chosen.passed,
        kept_fp32_nodes=kept, default_kept=search.default_kept, converted=report.converted,
        accuracy=AccuracyReached.of(chosen.validation), evaluations=search.used,
        sensitivity_passes=search.sensitivity_passes, max_evaluations=max_evaluations,
        seconds=time.perf_counter() - started, report=report,
        failures=chosen.validation.failures, model=converted)


@dataclass(frozen=True)
class _Trial:
    """One evaluated set of extra float32 nodes."""

    extra: frozenset[str]
    passed: bool
    deficit: float  # how far past the budget, in units of the budget's margin (<= 0: within)
    converted: int
    converted_nodes: tuple[str, ...]
    policy_kept: int
    validation: ValidationReport | None  # None when nothing was left to convert


class _Search:
    def __init__(self, model: onnx.ModelProto, feeds: list[Mapping[str, np.ndarray]],
                 reference: list[dict[str, np.ndarray]], precision: Precision,
                 budget: AccuracyBudget, policy: KeepPolicy, max_evaluations: int,
                 folder: Path) -> None:
        self.model, self.feeds, self.reference = model, feeds, reference
        self.precision, self.budget, self.policy = precision, budget, policy
        self.tolerances = budget.tolerances()
        self.max_evaluations, self.folder = max_evaluations, folder
        self.trials: dict[frozenset[str], _Trial] = {}
        self.used = self.sensitivity_passes = self.default_kept = 0
        self.measured: dict[str, tuple[float, str, int]] = {}  # node -> score, reason, rank
        self.items: list[frozenset[str]] = []  # what the backward pass may drop, in order
        self._probe: SensitivityProbe | None = None

    def left(self) -> int:
        return self.max_evaluations - self.used

    def run(self) -> _Trial:
        kept: frozenset[str] = frozenset()
        first = self.trial(kept)
        assert first is not None  # max_evaluations >= 1
        self.default_kept = first.policy_kept
        if first.passed:
            return first
        for _ in range(_MAX_ROUNDS):
            units = self.measure(self.trials[kept])
            if not units:
                break
            grown, passed = self.grow(kept, units)
            if grown == kept:
                break
            kept = grown
            if passed:
                break
        best = self.best()
        return self.prune(best) if best.passed else best

    def trial(self, extra: frozenset[str]) -> _Trial | None:
        """The evaluation of keeping `extra` in float32 too; None once evaluations run out."""
        if extra in self.trials:
            return self.trials[extra]
        if self.left() <= 0:
            return None
        converted, report = convert_precision(self.model, self.precision, keep_fp32=self.policy,
                                              extra_fp32_nodes=extra)
        policy_kept = len(report.kept) - len(extra)
        if report.converted == 0:
            trial = _Trial(extra, False, math.inf, 0, (), policy_kept, None)
        else:
            self.used += 1
            validation = evaluate_precision(self.model, converted, self.feeds,
                                            precision=self.precision,
                                            tolerances=self.tolerances,
                                            reference=self.reference).validation
            trial = _Trial(extra, validation.passed, self._deficit(validation), report.converted,
                           report.converted_nodes, policy_kept, validation)
        self.trials[extra] = trial
        return trial

    def measure(self, at: _Trial) -> list[SensitivityUnit]:
        """Ranked units at `at`'s conversion (costs one evaluation); [] when too few are left
        to act on the result."""
        if self.left() < 2 or at.validation is None:
            return []
        if self._probe is None:
            self._probe = SensitivityProbe(self.model, self.feeds, self.precision, self.folder)
        converted, _ = convert_precision(self.model, self.precision, keep_fp32=self.policy,
                                         extra_fp32_nodes=at.extra)
        self.used += 1
        self.sensitivity_passes += 1
        fresh, covered = [], set(at.extra)
        for unit in self._probe.measure(converted, at.converted_nodes, at.extra):
            if set(unit.nodes) <= covered:
                continue  # a higher-ranked unit already keeps all of it
            covered.update(unit.nodes)
            fresh.append(unit)
            for name in unit.nodes:
                self.measured.setdefault(name, (unit.score, unit.reason, len(self.measured)))
        return fresh

    def grow(self, kept: frozenset[str],
             units: list[SensitivityUnit]) -> tuple[frozenset[str], bool]:
        """Keep the shortest passing prefix of `units` (doubling, then bisection); without one,
        the closest prefix tried. Returns the new kept set and whether it passes."""

        def prefix(size: int) -> frozenset[str]:
            return kept.union(*(unit.nodes for unit in units[:size]))

        def adopt(size: int) -> frozenset[str]:
            for unit in units[:size]:
                if unit.kind == "range":
                    self._add_item(frozenset(unit.nodes))
                else:
                    for name in unit.nodes:
                        self._add_item(frozenset({name}))
            return prefix(size)

        failed, size, tried = 0, 1, []
        while True:
            trial = self.trial(prefix(size))
            if trial is None:
                break
            tried.append(size)
            if trial.passed:
                low, high = failed, size
                while high - low > 1:
                    middle = (low + high) // 2
                    probe = self.trial(prefix(middle))
                    if probe is None:
                        break
                    low, high = (low, middle) if probe.passed else (middle, high)
                return adopt(high), True
            failed = size
            if size == len(units):
                break
            size = min(2 * size, len(units))
        closest = min(tried, key=lambda s: (self.trials[prefix(s)].deficit, s), default=0)
        if closest and self.trials[prefix(closest)].deficit < self.trials[kept].deficit:
            return adopt(closest), False
        return kept, False

    def prune(self, best: _Trial) -> _Trial:
        """Drop kept items the budget does not need, least sensitive (latest) first."""
        current = best
        for item in reversed(self.items):
            if self.left() <= 0:
                break
            if not item <= current.extra:
                continue
            trial = self.trial(current.extra - item)
            if trial is not None and trial.passed:
                current = trial
        return current

    def best(self) -> _Trial:
        """The passing trial with the most nodes in low precision (then the fewest extra
        nodes), else the one closest to the budget."""
        passing = [t for t in self.trials.values() if t.passed]
        if passing:
            return min(passing, key=lambda t: (-t.converted, len(t.extra)))
        valid = [t for t in self.trials.values() if t.validation is not None]
        return min(valid, key=lambda t: (t.deficit, len(t.extra)))

    def rank(self, name: str) -> int:
        return self.measured.get(name, (0.0, "", len(self.measured)))[2]

    def kept_node(self, name: str, op_type: str) -> KeptFp32Node:
        score, reason, _ = self.measured.get(name, (math.nan, "not measured", 0))
        return KeptFp32Node(name=name, op_type=op_type, sensitivity=score, reason=reason)

    def _add_item(self, item: frozenset[str]) -> None:
        if not any(item <= existing for existing in self.items):
            self.items.append(item)

    def _deficit(self, validation: ValidationReport) -> float:
        """How far the worst output is past the budget, relative to the budget's own margin
        (1 - min_cosine, max_abs_err, 1 - min_top1); infinite for new NaNs or infinities."""
        if any(f.metric in NON_FINITE_METRICS for f in validation.failures):
            return math.inf
        reached, budget = AccuracyReached.of(validation), self.budget
        parts = []
        if budget.min_cosine is not None:
            parts.append(_shortfall(budget.min_cosine - reached.cosine, 1.0 - budget.min_cosine))
        if budget.max_abs_err is not None:
            parts.append(_shortfall(reached.max_abs_err - budget.max_abs_err,
                                    budget.max_abs_err))
        if budget.min_top1_agreement is not None and reached.top1_agreement is not None:
            parts.append(_shortfall(budget.min_top1_agreement - reached.top1_agreement,
                                    1.0 - budget.min_top1_agreement))
        return max(parts, default=0.0 if validation.passed else math.inf)


def _shortfall(excess: float, margin: float) -> float:
    if math.isnan(excess):
        return math.inf
    return excess / max(margin, 1e-12)


def _check_top1(budget: AccuracyBudget, reference: list[dict[str, np.ndarray]],
                graph: str) -> None:
    if budget.min_top1_agreement is None:
        return
    first = reference[0]
    if not any(looks_like_class_scores(array) for array in first.values()):
        shapes = ", ".join(f"{name!r} {list(np.shape(array))}" for name, array in first.items())
        raise ValueError(
            f"The budget limits top-1 agreement, but model {graph!r} has no output of class "
            f"scores [batch, classes >= 2] (its outputs: {shapes}); limit min_cosine or "
            "max_abs_err instead.")
