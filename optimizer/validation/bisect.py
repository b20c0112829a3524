"""Pass bisection: name the rewrite rule that breaks equivalence.

The model is optimized again with halves of the rules that fired, each result checked against
the original, until one rule is left whose rewrites break equivalence. When neither half fails
on its own, the first half stays on as context and the second is halved: rules build on earlier
rules' rewrites (a plugin SkipLayerNorm rule fires only on the LayerNormalization that
FuseLayerNorm wrote), so the rule blamed is the one whose rewrites, added to rules that pass,
break equivalence; the context it needed is reported with it. After a culprit is found it is
excluded and the search repeats, since two rules can each be wrong.

Clean-up passes (whole-graph functions such as `cleanup`) are prerequisites, not peers: they
fold constants and infer the shapes the rules check, so with them off almost no rule fires (on
the BERT encoder, only the erf GELU rule), even where the clean-up itself changed nothing. They
therefore stay on in every candidate while the rules are halved; a clean-up that changed the
graph is first judged on its own, with every rule off, and blamed when that alone fails.

Candidates optimized for TensorRT hold fuseforge plugin nodes; `equivalence_check` runs them
with the plugins decomposed into standard ops (`runner_for_model`), so a plugin rule that writes a
wrong node is blamed like any other rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import runner_for_model
from optimizer.optimize import OptimizeOptions, optimize_model, select_passes
from optimizer.validation.compare import compare_outputs
from optimizer.validation.tolerances import Tolerances

__all__ = ["BisectionResult", "BisectionStep", "bisect_rules", "equivalence_check"]

EquivalenceCheck = Callable[[onnx.ModelProto], bool]


@dataclass(frozen=True)
class BisectionStep:
    enabled_rules: tuple[str, ...]
    passed: bool


@dataclass(frozen=True)
class BisectionResult:
    """`culprits`: the rules blamed, one group per search (a group holds one rule).
    `contexts[i]`: the rules that were on, and pass without it, when culprit group i broke
    equivalence (empty when it fails on its own); it may need their rewrites to fire."""

    culprits: tuple[tuple[str, ...], ...]
    steps: tuple[BisectionStep, ...]
    passes_with_culprits_excluded: bool
    contexts: tuple[tuple[str, ...], ...] = ()

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
    so only our rewrites are judged; plugin nodes decomposed) on `feeds` and compares them within
    `tolerances`."""
    with runner_for_model(original) as reference:
        expected = [reference.infer(feed) for feed in feeds]

    def passes(candidate: onnx.ModelProto) -> bool:
        with runner_for_model(candidate) as runner:
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
    selected, _ = select_passes(options)
    cleanups = [p.name for p in selected if p.graph_function is not None]

    def fails_with(enabled: Sequence[str], also_excluded: Sequence[str]) -> bool:
        excluded = tuple(r for r in every_rule if r not in enabled) + tuple(also_excluded)
        candidate, _ = optimize_model(model, replace(options, excluded_rules=excluded))
        passed = is_equivalent(candidate)
        steps.append(BisectionStep(enabled_rules=tuple(enabled), passed=passed))
        return not passed

    culprits: list[tuple[str, ...]] = []
    contexts: list[tuple[str, ...]] = []
    known_bad: list[str] = list(options.excluded_rules)

    def result(passes_without_culprits: bool) -> BisectionResult:
        return BisectionResult(tuple(culprits), tuple(steps), passes_without_culprits,
                               tuple(contexts))

    while len(culprits) < max_culprits:
        _, report = optimize_model(model, replace(options, excluded_rules=tuple(known_bad)))
        applied = [r for r in report.applied_rules() if r not in known_bad]
        prerequisites = [c for c in cleanups if c not in known_bad]
        suspects = [r for r in applied if r not in prerequisites]
        if not fails_with([*prerequisites, *suspects], known_bad):
            return result(True)
        changed = [c for c in prerequisites if c in applied]
        if changed and fails_with(changed, known_bad):
            group, context = _narrow(changed, lambda enabled: fails_with(enabled, known_bad))
        else:
            group, context = _narrow(suspects, partial(_fails_after, fails_with, prerequisites,
                                                       known_bad))
        culprits.append(group)
        contexts.append(context)
        known_bad.extend(group)
    return result(False)


def _narrow(suspects: list[str],
            fails: Callable[[list[str]], bool]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The rule of `suspects` (which fail together, in pass order) to blame, and its context.

    Halves while one half fails with the context; when neither does, the first half joins the
    context (the later rules may need its rewrites) and the second is halved.
    """
    context: list[str] = []
    while len(suspects) > 1:
        half = len(suspects) // 2
        first, second = suspects[:half], suspects[half:]
        if fails([*context, *first]):
            suspects = first
        elif fails([*context, *second]):
            suspects = second
        else:
            context, suspects = [*context, *first], second
    return tuple(suspects), tuple(context)


def _fails_after(fails_with: Callable[[Sequence[str], Sequence[str]], bool], prerequisites: list[str],
                 known_bad: list[str], enabled: list[str]) -> bool:
    """Whether the candidate fails with `enabled` on top of the `prerequisites`."""
    return fails_with([*prerequisites, *enabled], known_bad)
