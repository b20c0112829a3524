"""Pass bisection: name the rewrite rule that breaks equivalence.

The model is optimized again with halves of the rules that fired, each result checked against
the original, until one rule is left whose rewrite alone fails the check (or a set of rules that
fail only together). After a culprit is found it is excluded and the search repeats, since two
rules can each be wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.validation.compare import Tolerances, compare_outputs

__all__ = ["BisectionResult", "BisectionStep", "bisect_rules", "equivalence_check"]

EquivalenceCheck = Callable[[onnx.ModelProto], bool]


@dataclass(frozen=True)
class BisectionStep:
    enabled_rules: tuple[str, ...]
    passed: bool


@dataclass(frozen=True)
class BisectionResult:
    """`culprits`: each entry is one rule, or several that break equivalence only together."""

    culprits: tuple[tuple[str, ...], ...]
    steps: tuple[BisectionStep, ...]
    passes_with_culprits_excluded: bool

    @property
    def culprit_rules(self) -> tuple[str, ...]:
        return tuple(rule for group in self.culprits for rule in group)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def equivalence_check(
    original: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
) -> EquivalenceCheck:
    """A check that runs a candidate and the original in ONNX Runtime (graph optimizations off,
    so only our rewrites are judged) on `feeds` and compares them within `tolerances`."""
    with TemporaryDirectory() as tmp:
        reference_path = Path(tmp) / "original.onnx"
        onnx.save(original, reference_path)
        with OnnxRuntimeRunner(reference_path) as reference:
            expected = [reference.infer(feed) for feed in feeds]

    def passes(candidate: onnx.ModelProto) -> bool:
        with TemporaryDirectory() as tmp:
            path = Path(tmp) / "candidate.onnx"
            onnx.save(candidate, path)
            with OnnxRuntimeRunner(path) as runner:
                actual = [runner.infer(feed) for feed in feeds]
        return compare_outputs(expected, actual, tolerances).passed

    return passes


def bisect_rules(
    model: onnx.ModelProto,
    options: OptimizeOptions,
    is_equivalent: EquivalenceCheck,
    *,
    max_culprits: int = 4,
) -> BisectionResult:
    """Find the rule(s) whose rewrites make `model` fail `is_equivalent` under `options`."""
    steps: list[BisectionStep] = []
    _, full_report = optimize_model(model, options)
    every_rule = tuple(s.rule for s in full_report.rules)

    def fails_with(enabled: Sequence[str], also_excluded: Sequence[str]) -> bool:
        excluded = tuple(r for r in every_rule if r not in enabled) + tuple(also_excluded)
        candidate, _ = optimize_model(model, replace(options, excluded_rules=excluded))
        passed = is_equivalent(candidate)
        steps.append(BisectionStep(enabled_rules=tuple(enabled), passed=passed))
        return not passed

    culprits: list[tuple[str, ...]] = []
    known_bad: list[str] = list(options.excluded_rules)
    while len(culprits) < max_culprits:
        _, report = optimize_model(model, replace(options, excluded_rules=tuple(known_bad)))
        suspects = [r for r in report.applied_rules() if r not in known_bad]
        if not fails_with(suspects, known_bad):
            return BisectionResult(tuple(culprits), tuple(steps), True)
        group = _narrow(suspects, lambda enabled: fails_with(enabled, known_bad))
        culprits.append(group)
        known_bad.extend(group)
    return BisectionResult(tuple(culprits), tuple(steps), False)


def _narrow(suspects: list[str], fails: Callable[[list[str]], bool]) -> tuple[str, ...]:
    """Halve `suspects` (which fail together) while one half fails on its own."""
    while len(suspects) > 1:
        half = len(suspects) // 2
        first, second = suspects[:half], suspects[half:]
        if fails(first):
            suspects = first
        elif fails(second):
            suspects = second
        else:
            break  # only the combination fails: report the whole group
    return tuple(suspects)
