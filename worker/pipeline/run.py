"""Run a claimed job's stages and record the outcome: the pipeline itself.

    load → (optimize → build_engine → validate)+ → benchmark → profile → [ablation] → store

The bracket is the fallback: when the engine fails validation and the job asks to fall back,
the pipeline loops over more conservative attempts (worker/pipeline/backends/fallbacks.py) until one
validates. Stages hand typed results to the next (worker/pipeline/results.py); every database
write goes through the run's `JobRecorder`, each in a short transaction of its own. It runs in
the job's own process (worker/supervision/job_process.py), which the supervisor kills on cancel or
when a stage breaks its limits.
"""

import logging
import shutil
from typing import Any

from core.reports import FusionReportRead, ProfileReport
from optimizer.errors import OptimizerError
from optimizer.registries.precisions import PRECISIONS
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.backends.fallbacks import fallback_record
from worker.pipeline.backends.registry import JOB_BACKENDS
from worker.pipeline.progress import JobStopped, StageProgress
from worker.pipeline.records.benchmark_context import benchmark_context
from worker.pipeline.records.benchmark_plots import benchmark_plots
from worker.pipeline.records.job_report_html import job_report_html
from worker.pipeline.records.outcome import (
    StoredArtifacts,
    benchmark_rows,
    report_columns,
    store_artifacts_then,
)
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import (
    Attempt,
    BuiltEngine,
    JobOutcome,
    JobRun,
    LoadedModel,
    OptimizedModel,
    Validation,
)
from worker.pipeline.stages import (
    ABLATION,
    BENCHMARK,
    BUILD_ENGINE,
    LOAD,
    OPTIMIZE,
    PROFILE,
    STORE,
    VALIDATE,
)
from worker.pipeline.steps.ablation import benchmark_ablation
from worker.pipeline.steps.benchmark import benchmark_engine
from worker.pipeline.steps.diagnose import diagnose_failure
from worker.pipeline.steps.larger_shape_check import check_rewrites_at_larger_shape
from worker.pipeline.steps.load import load_model
from worker.pipeline.steps.node_profile import profile_engine_nodes
from worker.pipeline.steps.optimize import optimize_graph
from worker.pipeline.steps.profile_checks import check_profile_extremes
from worker.pipeline.steps.validate import job_tolerances, validate_engine
from worker.runtime import WorkerRuntime

__all__ = ["backend_for", "run_claimed_job"]

logger = logging.getLogger(__name__)


def run_claimed_job(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
                    progress: StageProgress) -> None:
    """Run every stage of a claimed job and record how it ended (in the job's own process,
    which worker/supervision/supervisor.py starts, watches and kills). The scratch folder goes
    before the job's end is recorded, so an ended job has none."""
    outcome = JobOutcome()

    def succeed(stored: StoredArtifacts) -> bool:
        _remove_scratch(run)
        return recorder.succeed(outcome, stored)

    try:
        _run_stages(run, backend_for(run, runtime, recorder, progress), outcome, progress)
        progress.enter(STORE)
        if not store_artifacts_then(run.job_id, outcome, run.store, succeed):
            raise JobStopped
    except JobStopped:
        logger.info("job %s was cancelled; stopped between stages", run.job_id)
    except OptimizerError as err:
        logger.info("job %s failed: %s: %s", run.job_id, type(err).__name__, err)
        _remove_scratch(run)
        recorder.fail(type(err).__name__, str(err), outcome)
    except Exception as err:
        logger.exception("job %s hit an internal error", run.job_id)
        _remove_scratch(run)
        recorder.fail_internally(err, outcome)
    finally:
        _remove_scratch(run)


def _remove_scratch(run: JobRun) -> None:
    shutil.rmtree(run.scratch_dir, ignore_errors=True)


def backend_for(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
                progress: StageProgress) -> JobBackend[Any]:
    """The job's backend strategy.

    Raises:
        EngineBuildError: before any work, when this worker cannot build the job's backend
            (a tensorrt job on a worker started with a hand-written queue list).
    """
    return JOB_BACKENDS[run.config.backend](run, runtime, recorder, progress)


def _run_stages(run: JobRun, backend: JobBackend[Any], outcome: JobOutcome,
                progress: StageProgress) -> None:
    """Run every stage, recording each result in `outcome` as it comes.

    Raises:
        JobStopped: the job was cancelled meanwhile.
        OptimizerError: the model, a build, validation or a benchmark failed.
    """
    progress.enter(LOAD)
    loaded = load_model(run)
    optimized, engine = _validated_engine(run, backend, loaded, outcome, progress)
    span = progress.enter(BENCHMARK)
    timed = benchmark_engine(run, backend, loaded, engine, span, progress.note)
    outcome.benchmarks, outcome.sweep = timed.comparison, timed.sweep
    if timed.reference_engine is not None and outcome.reports.engine_report is not None:
        outcome.reports.engine_report.reference_engine = timed.reference_engine
    progress.enter(PROFILE)
    outcome.reports.profile_report = ProfileReport.model_validate(profile_engine_nodes(
        run, backend, loaded, optimized, engine, outcome.reports.accuracy().quantization))
    if run.config.ablation:
        span = progress.enter(ABLATION)
        outcome.ablation = benchmark_ablation(run, backend, loaded, span)
    # Before the scratch folder goes: the context reads the timed models, the plots are files.
    outcome.benchmark_context = benchmark_context(run, loaded, outcome)
    records = benchmark_rows(run.job_id, outcome)
    outcome.add_artifacts(benchmark_plots(run, records))
    outcome.add_artifacts((job_report_html(run, outcome, report_columns(outcome), records),))


def _validated_engine(run: JobRun, backend: JobBackend[Any], loaded: LoadedModel,
                      outcome: JobOutcome, progress: StageProgress
                      ) -> tuple[OptimizedModel, BuiltEngine[Any]]:
    """Optimize, build and validate: the job's own attempt, then its fallbacks (fp32 jobs that
    ask for them) until one validates; then check the engine at its profiles' extremes.

    Raises:
        AccuracyMismatchError: no attempt validates, the rewrites fail at a larger shape (dims
            left dynamic), or the engine fails at a profile's end.
    """
    attempt = Attempt.the_jobs_own(run.config)
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
        outcome.validation = validation.report
        accuracy.update(validation.accuracy)
        if first_failure is None and not PRECISIONS[run.config.precision].rewrites:
            accuracy.passed_first_time = validation.passed
        if validation.passed:
            break
        if fallbacks is None:
            if PRECISIONS[run.config.precision].rewrites:  # judged, never bisected
                validation.report.raise_if_failed(validation.subject)
            diagnosis = diagnose_failure(run, backend, loaded, optimized,
                                         job_tolerances(run.config))
            accuracy.update(diagnosis.to_accuracy())
            if run.config.on_validation_failure != "fallback":
                diagnosis.raise_failure(validation)
            fallbacks = backend.fallback_attempts(diagnosis.blamed_rules)
            first_failure = validation
        if not fallbacks:
            backend.raise_no_attempt_passed(validation)
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
