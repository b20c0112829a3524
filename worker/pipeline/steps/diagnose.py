"""After an engine fails validation: which rewrite rules to blame, and where outputs diverge.

Bisection re-runs our passes with rule subsets (ONNX Runtime's own optimizations off) to name
the rule(s) that break equivalence; localization finds the first tensor where the fused graph
departs from the original. Both go to the job's accuracy report, and the failure names them.
"""

from dataclasses import dataclass
from typing import Any, NoReturn

import onnx

from core.job_config import JobConfig
from core.reports import AccuracyReport
from optimizer.errors import AccuracyMismatchError, InternalError
from optimizer.optimize import OptimizeOptions
from optimizer.validation import Tolerances
from optimizer.validation.bisect import BisectionResult, bisect_rules, equivalence_check
from optimizer.validation.localize import Divergence, localize_divergence
from worker.pipeline.advice import failure_advice
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.results import JobRun, LoadedModel, OptimizedModel, Validation

__all__ = ["Diagnosis", "diagnose_failure"]

_LOCALIZE_SAMPLES = 2


@dataclass(frozen=True)
class Diagnosis:
    bisection: BisectionResult
    blame: str  # who is to blame, in words
    divergence: Divergence | None
    blamed_passes: tuple[str, ...] = ()  # the passes holding the blamed rules, where known

    @property
    def blamed_rules(self) -> tuple[str, ...]:
        return tuple(rule for group in self.bisection.culprits for rule in group)

    def to_accuracy(self) -> AccuracyReport:
        return AccuracyReport(
            bisection=self.bisection.to_dict(), blame=self.blame,
            localization=self.divergence.to_dict() if self.divergence else None)

    def raise_failure(self, validation: Validation, config: JobConfig) -> NoReturn:
        """Fail the job that does not fall back: the verdict, the first divergence, the blame,
        then what would make it pass (`failure_advice`)."""
        where = (f" First divergence: {self.divergence.describe(self.blamed_rules)}"
                 if self.divergence else "")
        try:
            validation.report.raise_if_failed(validation.subject, advice="")
        except AccuracyMismatchError as err:
            advice = failure_advice(config, validation.report, blamed=self.blamed_rules,
                                    blamed_passes=self.blamed_passes)
            raise AccuracyMismatchError(f"{err}{where} ({self.blame}). "
                                        f"{advice}") from None
        raise InternalError(f"{validation.subject} passed validation but was diagnosed")


def diagnose_failure(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                     optimized: OptimizedModel, tolerances: Tolerances) -> Diagnosis:
    """Bisect the job's rewrite rules and localize the first divergence (a few samples)."""
    static_model = onnx.load(loaded.static_path)
    options = OptimizeOptions(backend=run.config.backend, passes=run.config.passes)
    bisection = bisect_rules(static_model, options,
                             equivalence_check(static_model, loaded.feeds, tolerances))
    divergence = localize_divergence(
        static_model, onnx.load(optimized.fused_path), loaded.feeds[:_LOCALIZE_SAMPLES],
        tolerances, fusion_report=optimized.fusion_report,
    )
    owners = {stats.rule: stats.pass_name for stats in optimized.fusion_report.rules}
    blamed_passes = tuple(dict.fromkeys(owners[rule] for rule in bisection.culprit_rules
                                        if rule in owners))
    return Diagnosis(bisection=bisection, blame=_blame(backend, bisection), divergence=divergence,
                     blamed_passes=blamed_passes)


def _blame(backend: JobBackend[Any], result: BisectionResult) -> str:
    if not result.culprits:
        return ("our rewrites alone keep the outputs within tolerance; the difference comes from "
                f"{backend.own_optimizations}")
    contexts = result.contexts or tuple(() for _ in result.culprits)
    return "rule(s) " + ", ".join(
        "+".join(group) + (f" (on top of {', '.join(context)})" if context else "")
        for group, context in zip(result.culprits, contexts, strict=True)
    ) + " break equivalence"

