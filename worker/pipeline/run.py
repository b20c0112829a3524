"""Run a claimed job's stages and record the outcome: the pipeline itself.

    load → [search] → (optimize → build_engine → validate)+ → benchmark → profile → [ablation]
         → store

The bracket is the fallback: when the engine fails validation and the job asks to fall back,
the pipeline loops over more conservative attempts (worker/pipeline/backends/fallbacks.py) until one
validates (engine_attempts.py). Where none does, or the benchmark measures the engine slower
than the original, a backend that can ships the original unchanged (ship_original.py). A
search job first builds, judges and races its candidates (search_stage.py), then runs the rest
of the pipeline as its winner's config, never-slower rule included; where no candidate beat
the original (the original races in every search), the original ships, saying why.

Stages hand typed results to the next (worker/pipeline/results.py); every database write
goes through the run's `JobRecorder`, each in a short transaction of its own. It runs in the
job's own process (worker/supervision/job_process.py), which the supervisor kills on cancel or
when a stage breaks its limits.
"""

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.artifact_refs import ArtifactStoreUnavailable
from core.db.outage import DatabaseOutage, is_database_outage, outage_text
from core.disk_space import free_space_text, no_room_error
from core.reports import ProfileReport, StageMemory
from optimizer.errors import OptimizerError
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.backends.registry import JOB_BACKENDS
from worker.pipeline.engine_attempts import validated_engine
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
    JobOutcome,
    JobRun,
)
from worker.pipeline.search_stage import search_configurations
from worker.pipeline.ship_original import ship_original, slower_than_original
from worker.pipeline.stage_memory import METHOD as STAGE_MEMORY_METHOD
from worker.pipeline.stages import (
    ABLATION,
    BENCHMARK,
    LOAD,
    PROFILE,
    STORE,
)
from worker.pipeline.steps.ablation import benchmark_ablation
from worker.pipeline.steps.benchmark import benchmark_engine
from worker.pipeline.steps.load import load_model
from worker.pipeline.steps.node_profile import profile_engine_nodes
from worker.pipeline.steps.unpack import unpack_model
from worker.runtime import WorkerRuntime

__all__ = ["NO_ROOM", "STORE_DOWN", "SearchFoundNothing", "backend_for", "run_claimed_job"]

logger = logging.getLogger(__name__)


NO_ROOM = "InsufficientStorage"  # the error code of a job that found its disk full
STORE_DOWN = "ArtifactStoreUnavailable"  # ... of a job whose artifact store did not answer


class SearchFoundNothing(OptimizerError):
    """Every candidate of a search was refused, failed, or out of its budgets."""


def run_claimed_job(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
                    progress: StageProgress) -> None:
    """Run every stage of a claimed job and record how it ended (in the job's own process,
    which worker/supervision/supervisor.py starts, watches and kills). The scratch folder goes
    before the job's end is recorded, so an ended job has none.

    Raises:
        DatabaseOutage: the database stayed away past the recorder's retry window; nothing of
            the job's end could be recorded (its supervisor queues it again once it is back).
    """
    try:
        _run_and_record(run, runtime, recorder, progress)
    except Exception as err:
        if is_database_outage(err):  # nothing can be recorded: the supervisor waits it out
            raise DatabaseOutage(outage_text(err)) from None
        raise
    finally:
        _remove_scratch(run)


def _run_and_record(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
                    progress: StageProgress) -> None:
    outcome = JobOutcome()

    def succeed(stored: StoredArtifacts) -> bool:
        _remove_scratch(run)
        _record_stage_memory(outcome, progress)
        return recorder.succeed(outcome, stored)

    try:
        # The backend first: a worker that cannot build it refuses before any stage runs.
        backend = backend_for(run, runtime, recorder, progress)
        _run_stages(run, backend, runtime, recorder, outcome, progress)
        progress.enter(STORE)
        if not store_artifacts_then(run.job_id, run.attempt, outcome, run.store,
                                    succeed):
            raise JobStopped
    except JobStopped:
        logger.info("job %s was cancelled; stopped between stages", run.job_id)
    except Exception as err:
        _remove_scratch(run)
        if is_database_outage(err):
            raise  # run_claimed_job hands it to the supervisor
        _record_stage_memory(outcome, progress)
        full = no_room_error(err)  # however deep a write failed, the disk is to blame
        if full is not None:
            logger.error("job %s: no room to write: %s", run.job_id, full)
            recorder.fail(NO_ROOM, _no_room_message(run, full), outcome)
        elif isinstance(err, ArtifactStoreUnavailable):  # ours to fix, not the model's
            logger.error("job %s: %s", run.job_id, err)
            recorder.fail(STORE_DOWN, f"{err}. Nothing of the job was kept; submit it again "
                          "once the store answers (GET /healthz reports it).", outcome)
        elif isinstance(err, OptimizerError):
            logger.info("job %s failed: %s: %s", run.job_id, type(err).__name__, err)
            recorder.fail(type(err).__name__, str(err), outcome)
        else:
            logger.exception("job %s hit an internal error", run.job_id)
            recorder.fail_internally(err, outcome)


def _record_stage_memory(outcome: JobOutcome, progress: StageProgress) -> None:
    peaks = progress.memory.peak_rss_mb()
    if peaks:
        outcome.reports.stage_memory = StageMemory(peak_rss_mb=peaks, method=STAGE_MEMORY_METHOD)


def _no_room_message(run: JobRun, err: OSError) -> str:
    folder = Path(err.filename).parent if err.filename else run.scratch_dir
    return (f"Writing {err.filename or 'a file of the job'} in {folder} found no room: "
            f"{os.strerror(err.errno or 0)} ({free_space_text(folder)} on its disk). Nothing "
            "of the job was kept. Free space on the data folder's disk (FUSEFORGE_DATA_DIR; "
            "FUSEFORGE_RETENTION__ARTIFACTS_DAYS expires old artifacts) or raise the quota or "
            "file-size limit the worker runs under, then run the job again.")


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


def _run_stages(run: JobRun, backend: JobBackend[Any], runtime: WorkerRuntime,
                recorder: JobRecorder, outcome: JobOutcome, progress: StageProgress) -> None:
    """Run every stage, recording each result in `outcome` as it comes.

    Raises:
        JobStopped: the job was cancelled meanwhile.
        OptimizerError: the model, a build, validation or a benchmark failed, or a search
            found no candidate within its budgets.
    """
    asked = run.config  # a search job runs on as its winner's config below
    progress.enter(LOAD)
    unpack_model(run)
    loaded = load_model(run)
    for warning in loaded.warnings:
        progress.note(f"warning: {warning}")
    original: str | None = None  # why a search ships the original
    if run.config.search is not None:
        searched = search_configurations(
            run, loaded, lambda each, its: backend_for(each, runtime, recorder, its),
            recorder, progress, capabilities=runtime.capabilities)
        outcome.reports.search_report = searched.report
        original = searched.original if backend.original_backend else None
        if searched.winner is None and original is None:
            raise SearchFoundNothing(f"No candidate of the search won: {searched.report.why}. "
                                     "search_report lists each candidate and why it lost.")
        if searched.winner is not None:
            run = replace(run, config=searched.winner)
            backend = backend_for(run, runtime, recorder, progress)
    if original is not None:
        optimized = None
        engine = ship_original(run, backend, loaded, outcome, original, progress.note)
    else:
        optimized, engine = validated_engine(run, backend, loaded, outcome, progress)
    span = progress.enter(BENCHMARK)
    timed = benchmark_engine(run, backend, loaded, engine, span, progress.note)
    outcome.benchmarks, outcome.sweep = timed.comparison, timed.sweep
    if timed.reference_engine is not None and outcome.reports.engine_report is not None:
        outcome.reports.engine_report.reference_engine = timed.reference_engine
    # Never ship an engine slower than what the user runs today (a search's winner included):
    # the benchmark's records stay as measured, saying why.
    slower = slower_than_original(timed.comparison) if backend.original_backend else None
    if slower is not None and outcome.original_shipped is None:
        ship_original(run, backend, loaded, outcome, slower, progress.note)
    progress.enter(PROFILE)
    if outcome.original_shipped is not None:
        outcome.reports.profile_report = ProfileReport(
            skipped=f"the original model ships unchanged ({outcome.original_shipped}): no "
                    "engine of the job's to profile")
    else:
        assert optimized is not None, "an engine of the job's is optimized before it is built"
        outcome.reports.profile_report = ProfileReport.model_validate(profile_engine_nodes(
            run, backend, loaded, optimized, engine, outcome.reports.accuracy().quantization))
    if run.config.ablation:
        span = progress.enter(ABLATION)
        outcome.ablation = benchmark_ablation(run, backend, loaded, span)
    # Before the scratch folder goes: the context reads the timed models, the plots are files.
    outcome.benchmark_context = benchmark_context(run, loaded, outcome)
    records = benchmark_rows(run.job_id, outcome)
    outcome.add_artifacts(benchmark_plots(run, records))
    outcome.add_artifacts((job_report_html(run, outcome, report_columns(outcome), records,
                                           asked=asked),))
