"""`fuseforge validate --bisect`: name the rule of FuseForge's passes that fails the check.

The candidate is taken to be ORIGINAL optimized by FuseForge's passes. ORIGINAL is optimized
again with halves of the rules that fired (optimizer/validation/bisect.py), each result judged
by the same check as the candidate: ONNX Runtime with graph optimizations off, the same feeds,
tolerances, labels and class outputs.

Input shapes: some rules fire only on static shapes (FuseConvAddRelu does not fire on
small_cnn with a dynamic batch), so ORIGINAL is optimized at the candidate's input shapes: fixed
to them (which are the check's feed shapes, or ONNX Runtime would have refused the feeds) when
the candidate's inputs are all static, as a job's engine source is and as `fuseforge optimize
--input-shape` writes; left as declared when the candidate keeps dynamic dims, as `fuseforge
optimize` without --input-shape does. When the candidate's ops still differ from those of
ORIGINAL optimized again, it is not what these passes produce and the answer says so: the rules
named then break ORIGINAL's optimization, which need not be what broke the candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.fusion_report import FusionReport
from optimizer.model.graphs import op_histogram
from optimizer.model.shapes import fix_input_shapes
from optimizer.model.tensor_specs import Dim, TensorSpec, summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.validation.bisect import BisectionResult, bisect_rules
from optimizer.validation.compare import compare_outputs
from optimizer.validation.tolerances import Tolerances

__all__ = ["Bisection", "bisect_candidate"]


@dataclass(frozen=True)
class Bisection:
    """What --bisect found: the rules of FuseForge's passes that break the check, if any."""

    candidate: Path
    options: OptimizeOptions
    result: BisectionResult | None  # None: the candidate passed, nothing was bisected
    input_shapes: Mapping[str, tuple[Dim, ...]] | None = None  # ORIGINAL's, re-optimized
    report: FusionReport | None = None  # of ORIGINAL optimized again with every rule
    candidate_ops: Mapping[str, int] | None = None  # the candidate's op histogram

    @property
    def candidate_matches(self) -> bool | None:
        """Whether the candidate has the ops of ORIGINAL optimized again (None: not bisected)."""
        if self.report is None or self.candidate_ops is None:
            return None
        return dict(self.candidate_ops) == dict(self.report.ops_after)

    @property
    def rules_applied(self) -> int:
        return 0 if self.report is None else len(self.report.applied_rules())

    @property
    def pass_of(self) -> dict[str, str]:
        """The pass holding each rule."""
        rules = () if self.report is None else self.report.rules
        return {stats.rule: stats.pass_name for stats in rules}

    def describe(self) -> str:
        """One paragraph for the CLI: the rules to blame, or why there are none."""
        if self.result is None:
            return "Bisection: validation passed, so there is nothing to bisect."
        shapes = ", ".join(f"{name}={','.join('?' if d is None else str(d) for d in dims)}"
                           for name, dims in (self.input_shapes or {}).items())
        passes = self.options.passes
        setting = (f"--passes {passes if isinstance(passes, str) else ','.join(passes)} "
                   f"--backend {self.options.backend}, input shapes {shapes}")
        if not self.result.culprits:
            return (f"Bisection ({setting}): ORIGINAL optimized again by FuseForge's passes "
                    f"({self.rules_applied} rule(s) applied) passes this check, so no rewrite "
                    f"rule of these passes is to blame: {str(self.candidate)!r} is not what "
                    f"they produce{self._op_difference()}. It may have been optimized with "
                    "other passes, for another backend or by another tool, converted to another "
                    "precision, or edited afterwards; the localisation shows where it departs "
                    "from the original.")
        groups = "; ".join(self._group(group) for group in self.result.culprits)
        them = "it" if len(self.result.culprit_rules) == 1 else "them"
        after = (f"With {them} excluded the re-optimized model passes."
                 if self.result.passes_with_culprits_excluded else
                 f"With {them} excluded it still fails: more rules may be wrong than the search "
                 "names, or the failure does not come from a rule alone.")
        return (f"Bisection ({setting}; {len(self.result.steps)} optimizations checked): "
                f"{groups}. {after}{self._mismatch()}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: BisectionResult's fields, the setting, and `message` (describe())."""
        found: dict[str, Any] = ({"culprits": [], "steps": [],
                                  "passes_with_culprits_excluded": None}
                                 if self.result is None else self.result.to_dict())
        passes, owners = self.options.passes, self.pass_of
        culprits = () if self.result is None else self.result.culprit_rules
        return {
            "ran": self.result is not None,
            "passes": passes if isinstance(passes, str) else list(passes),
            "backend": self.options.backend,
            "input_shapes": {name: list(dims) for name, dims in (self.input_shapes or {}).items()},
            "rules_applied": self.rules_applied,
            "candidate_matches_passes": self.candidate_matches,
            **found,
            "culprit_passes": {rule: owners[rule] for rule in culprits if rule in owners},
            "message": self.describe(),
        }

    def _group(self, group: Sequence[str]) -> str:
        owners = self.pass_of
        named = " + ".join(f"{rule} (pass {owners[rule]})" if rule in owners else rule
                           for rule in group)
        return (f"rule {named} breaks equivalence" if len(group) == 1 else
                f"rules {named} break equivalence only together")

    def _mismatch(self) -> str:
        if self.candidate_matches is not False:
            return ""
        return (f" But {str(self.candidate)!r} is not what these passes produce"
                f"{self._op_difference()}: it may have been optimized with other passes, for "
                "another backend or by another tool. These rules break ORIGINAL's "
                "optimization and need not be what broke the candidate: compare with the "
                "localisation.")

    def _op_difference(self) -> str:
        if self.candidate_matches is not False or self.report is None:
            return ""
        ops, after = self.candidate_ops or {}, self.report.ops_after
        differ = ", ".join(f"{op} {ops.get(op, 0)} vs {after.get(op, 0)}"
                           for op in sorted({*ops, *after}) if ops.get(op, 0) != after.get(op, 0))
        return f" (op counts, candidate vs ORIGINAL optimized again: {differ})"


def bisect_candidate(
    original: Path,
    candidate: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    options: OptimizeOptions,
    *,
    labels: np.ndarray | None = None,
    class_outputs: Collection[str] | None = None,
) -> Bisection:
    """Optimize `original` again with `options`, at `candidate`'s input shapes (see the module
    docstring), and name the rule(s) whose rewrites make it fail the check `fuseforge validate`
    ran on `candidate` with `feeds`, `tolerances`, `labels` and `class_outputs`.

    Raises:
        OptimizerError: the candidate's shapes do not fit the original, a pass fails on it, or
            ONNX Runtime cannot run a re-optimized model.
    """
    candidate_model = onnx.load(candidate)
    model = onnx.load(original)
    static = _static_shapes(summarize_model(candidate_model).inputs)
    if static is not None:
        model = fix_input_shapes(model, static)
    shapes = {spec.name: spec.shape for spec in summarize_model(model).inputs}
    _, report = optimize_model(model, options)
    passes = _check(original, feeds, tolerances, labels=labels, class_outputs=class_outputs)
    return Bisection(candidate=candidate, options=options,
                     result=bisect_rules(model, options, passes), input_shapes=shapes,
                     report=report, candidate_ops=op_histogram(candidate_model))


def _static_shapes(inputs: Sequence[TensorSpec]) -> dict[str, list[int]] | None:
    """Each input's shape, or None if any input has a dynamic dim."""
    shapes = {}
    for spec in inputs:
        dims = [dim for dim in spec.shape if isinstance(dim, int)]
        if len(dims) != len(spec.shape):
            return None
        shapes[spec.name] = dims
    return shapes


def _check(
    original: Path, feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances, *,
    labels: np.ndarray | None, class_outputs: Collection[str] | None,
) -> Callable[[onnx.ModelProto], bool]:
    """The CLI's check as a predicate on a model, the reference run once.

    Not `optimizer.validation.bisect.equivalence_check`: that one takes no labels or class
    outputs, and a candidate failing only on accuracy would bisect to nothing.
    """
    with OnnxRuntimeRunner(original, optimization_level="disabled") as reference:
        expected = [reference.infer(feed) for feed in feeds]

    def passes(model: onnx.ModelProto) -> bool:
        with TemporaryDirectory(prefix="fuseforge-bisect-") as tmp:
            path = Path(tmp) / "candidate.onnx"
            onnx.save(model, path)
            with OnnxRuntimeRunner(path, optimization_level="disabled") as runner:
                actual = [runner.infer(feed) for feed in feeds]
        return compare_outputs(expected, actual, tolerances, labels=labels,
                               class_outputs=class_outputs).passed

    return passes
