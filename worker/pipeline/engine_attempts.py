"""The engine a job ships: optimize, build and validate, then the fallbacks until one validates.

    (optimize → build_engine → validate)+

The job's own attempt first; when its engine fails validation and the job asks to fall back,
more conservative attempts (worker/pipeline/backends/fallbacks.py) until one validates; when
none does, the original itself ships where the backend can ship it (ship_original.py). A search
runs this for each candidate, then once more for its winner.
"""

from typing import Any

from core.reports import FusionReportRead
from optimizer.registries.precisions import PRECISIONS
from worker.pipeline.advice import failure_advice
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.backends.fallbacks import fallback_record
from worker.pipeline.progress import StageProgress
from worker.pipeline.results import (
    Attempt,
    BuiltEngine,
    JobOutcome,
    JobRun,
    LoadedModel,
    OptimizedModel,
    Validation,
)
from worker.pipeline.ship_original import ship_original
from worker.pipeline.stages import BUILD_ENGINE, OPTIMIZE, VALIDATE
from worker.pipeline.steps.diagnose import diagnose_failure
from worker.pipeline.steps.larger_shape_check import check_rewrites_at_larger_shape
from worker.pipeline.steps.optimize import optimize_graph
from worker.pipeline.steps.profile_checks import check_profile_extremes
from worker.pipeline.steps.validate import job_tolerances, validate_engine

__all__ = ["validated_engine"]


def validated_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                      outcome: JobOutcome, progress: StageProgress
                      ) -> tuple[OptimizedModel, BuiltEngine[Any]]:
    """Optimize, build and validate: the job's own attempt, then its fallbacks (fp32 jobs that
    ask for them) until one validates, else the original where the backend ships it (then
    `outcome.original_shipped` says why); then check the engine at its profiles' extremes.

    Raises:
        AccuracyMismatchError: no attempt validates (on a backend that cannot ship the
            original), the rewrites fail at a larger shape (dims left dynamic), or the engine
            fails at a profile's end.
    """
    attempt = Attempt.the_jobs_own(run.config)
    tried: list[str] = []
    reports, accuracy = outcome.reports, outcome.reports.accuracy()
    fallbacks: list[Attempt] | None = None  # decided after the first failure
    first_failure: Validation | None = None
    while True:
        note = None if first_failure is None else f"fallback: {attempt.kept}"
        progress.enter(OPTIMIZE, note)
        optimized = optimize_graph(run, loaded, attempt, note=progress.note)
        reports.fusion_report = FusionReportRead.model_validate(optimized.fusion_report.to_dict())
        accuracy.update(optimized.accuracy)
        outcome.add_artifacts(optimized.artifacts)
        span = progress.enter(BUILD_ENGINE, note)
        engine = backend.build_engine(loaded, optimized, attempt, span)
        reports.engine_report = engine.report
        if engine.node_precisions is not None and accuracy.quantization is not None:
            accuracy.quantization["node_precisions"] = engine.node_precisions
        if engine.quantization is not None and accuracy.quantization is not None:
            accuracy.quantization.update(engine.quantization)
            if "why" in engine.quantization:
                progress.note(f"{run.config.precision}: fp16 ships: {engine.quantization['why']}")
        outcome.add_artifacts(engine.artifacts)
        progress.enter(VALIDATE, note)
        validation = validate_engine(run, backend, loaded, optimized, engine)
        tried.append(attempt.kept)
        outcome.validation = validation.report
        accuracy.update(validation.accuracy)
        if first_failure is None and not PRECISIONS[run.config.precision].rewrites:
            accuracy.passed_first_time = validation.passed
        if validation.passed:
            break
        if fallbacks is None:
            if PRECISIONS[run.config.precision].rewrites:  # judged, never bisected
                validation.report.raise_if_failed(
                    validation.subject,
                    advice=failure_advice(run.config, validation.report, falls_back=False))
            diagnosis = diagnose_failure(run, backend, loaded, optimized,
                                         job_tolerances(run.config))
            accuracy.update(diagnosis.to_accuracy())
            if run.config.on_validation_failure != "fallback":
                diagnosis.raise_failure(validation, run.config)
            fallbacks = backend.fallback_attempts(diagnosis.blamed_rules)
            first_failure = validation
        if not fallbacks:
            if backend.original_backend is None:
                backend.raise_no_attempt_passed(validation)
            why = f"every attempt failed validation ({'; '.join(tried)})"
            accuracy.fallback = fallback_record(Attempt.the_original(), first_failure or validation,
                                                original_shipped=why)
            return optimized, ship_original(run, backend, loaded, outcome, why, progress.note)
        attempt = fallbacks.pop(0)
    if first_failure is not None:
        accuracy.fallback = fallback_record(attempt, first_failure)
    larger = check_rewrites_at_larger_shape(run, loaded,
                                            attempt.optimize_options(run.config.backend))
    if larger is not None:  # dims left dynamic: the rewrites are also checked at a larger shape
        accuracy.larger_shape_check = larger.record
        larger.raise_if_failed(run.job_id)
    if run.config.profiles:  # an engine built for a range of shapes: check both ends too
        with backend.open_runner(engine) as runner:
            checks = check_profile_extremes(run, loaded, runner, job_tolerances(run.config))
        accuracy.profile_checks = checks.results
        checks.raise_if_failed()
    return optimized, engine
