"""The job's own process: everything after the claim, under the supervisor's watch.

worker/supervision/supervisor.py starts it with `IsolatedChild(run_job_process, (spec,))`, forked
from the worker's template (worker/supervision/job_template.py, which has imported this module and
nothing else), and it builds its own runtime (database engine, store, toolkit) from the settings it
is handed, runs the pipeline and records how the job ended. It can be killed at any moment;
the supervisor then records what happened and cleans up.
"""

import pickle
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.logging_setup import configure_logging, job_context
from core.plugins import load_plugins
from core.settings import Settings
from optimizer.backends.onnxruntime.run_limits import set_first_run_limit
from optimizer.capabilities import HostCapabilities
from worker.pipeline.progress import StageProgress
from worker.pipeline.records.calibrations import StoredCalibrations
from worker.pipeline.records.recorder import ClaimedJob, JobRecorder
from worker.pipeline.results import JobRun, StoredArchive
from worker.pipeline.run import run_claimed_job
from worker.runtime import WorkerRuntime

__all__ = ["JobProcessSpec", "run_job_process"]


@dataclass(frozen=True)
class JobProcessSpec:
    """What the job's process is handed (pickled): the claimed job and its worker's setup."""

    job_id: uuid.UUID
    claimed: ClaimedJob
    settings: Settings
    capabilities: HostCapabilities
    scratch_dir: Path
    stage_file: Path  # where it marks the stage it runs (worker/pipeline/progress.py)
    memory_bandwidth_gb_s: float | None = None  # measured when its worker started


def run_job_process(plugins: tuple[str, ...], pickled_spec: bytes) -> None:
    """Register the worker's plug-ins (`Settings.plugins`), then run the claimed job to its end
    (module-level: the child imports it by name). `pickled_spec` is the `JobProcessSpec`, read
    only once the plug-ins are in: its config may name their backends and precisions."""
    load_plugins(plugins)
    spec: JobProcessSpec = pickle.loads(pickled_spec)  # our own worker's bytes
    configure_logging(spec.settings.log_format, role="job")
    with job_context(spec.job_id):  # every line of this process is the job's
        _run(spec)


def _run(spec: JobProcessSpec) -> None:
    set_first_run_limit(spec.settings.jobs.first_run_limit_s)
    runtime = WorkerRuntime.from_settings(spec.settings, capabilities=spec.capabilities,
                                          bandwidth_gb_s=spec.memory_bandwidth_gb_s)
    claimed = spec.claimed
    recorder = JobRecorder(spec.job_id, runtime.sessions,
                           retry_s=spec.settings.jobs.database_retry_s, worker=claimed.worker)
    archive = None
    if claimed.model_file is not None:  # unpacked by the pipeline, which records a failure
        archive = StoredArchive(claimed.model_uri, spec.scratch_dir / "upload")
        model_path = archive.folder.joinpath(*claimed.model_file.split("/"))
    else:
        model_path = _as_uploaded(runtime.store.local_path(claimed.model_uri),
                                  claimed.model_name, spec.scratch_dir)
    run = JobRun(
        job_id=spec.job_id,
        config=claimed.config,
        model_path=model_path,
        model_archive=archive,
        dataset_path=runtime.store.local_path(claimed.dataset_uri) if claimed.dataset_uri else None,
        calibration_path=(runtime.store.local_path(claimed.calibration_uri)
                          if claimed.calibration_uri else None),
        calibrations=_stored_calibrations(runtime, claimed),
        scratch_dir=spec.scratch_dir,
        settings=runtime.settings,
        store=runtime.store,
        worker=claimed.worker,
        attempt=claimed.attempt,
        memory_bandwidth_gb_s=runtime.memory_bandwidth_gb_s,
    )
    run_claimed_job(run, runtime, recorder, StageProgress(recorder, spec.stage_file))


def _as_uploaded(stored: Path, name: str | None, scratch_dir: Path) -> Path:
    """The stored model (a file named by its hash) under the name it was uploaded with: a link
    in the job's scratch folder, so that every message that names the model file (ONNX
    Runtime's refusals, a runner's failures) names the user's model, not the store's key."""
    shown = Path(name or "").name
    if not shown or shown in (".", "..") or shown == stored.name:
        return stored
    folder = scratch_dir / "uploaded"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / shown
    link.unlink(missing_ok=True)  # a second attempt of the job in the same folder
    link.symlink_to(stored.resolve())
    return link


def _stored_calibrations(runtime: WorkerRuntime, claimed: ClaimedJob) -> StoredCalibrations | None:
    if claimed.calibration_id is None or claimed.project_id is None or claimed.model_id is None:
        return None
    return StoredCalibrations(runtime.sessions, runtime.store, project_id=claimed.project_id,
                              model_id=claimed.model_id, dataset_id=claimed.calibration_id)
