"""Build a TensorRT engine for a job: one build at a time per GPU, in a child process under the
job settings' time and memory limits, starting from the stored timing cache and storing it back,
with the builder's progress and log relayed to the job (worker/build_events.py).

    engine = build_job_engine(ctx, ctx.engine_source_path, ctx.scratch_dir / "engine",
                              label="TensorRT build", stage="build_engine",
                              progress_span=(0.2, 0.4))

A build that crashes, hangs or runs out of memory fails the job with an `EngineBuildError` that
says so; the worker process is untouched. A cancelled job stops its build within a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import onnx

from api.db import job_state
from api.db.session import session_scope
from api.settings import get_settings
from api.storage import LocalArtifactStore
from optimizer.backends.tensorrt import TimingCacheKey, TrtBuildOptions, TrtEngine
from optimizer.capabilities import GpuInfo
from optimizer.errors import EngineBuildError
from optimizer.precision import convert_precision
from worker.build_events import BuildEventRelay, BuildEventWriter, job_reporter
from worker.capabilities import detect_worker_capabilities, refusal_for
from worker.context import JobContext
from worker.isolation import ChildLimits, one_at_a_time, run_isolated
from worker.tensorrt_toolkit import load_toolkit
from worker.timing_caches import load_stored_cache, save_cache

__all__ = ["build_job_engine", "build_log_path", "gpu_lock", "model_at_job_precision"]

_GIB = 2**30


def build_log_path(out_dir: Path) -> Path:
    """Where the build's full log (INFO and above) is written, next to `out_dir`."""
    return out_dir.with_name(f"{out_dir.name}.build.log")


def build_job_engine(
    ctx: JobContext,
    model_path: Path,
    out_dir: Path,
    *,
    label: str,
    stage: str,
    progress_span: tuple[float, float],
) -> TrtEngine:
    """Build `model_path` into `out_dir` for job `ctx` (its precision, shapes and profiles).

    Raises:
        EngineBuildError: this worker cannot build TensorRT engines, or the build failed, ran
            past `jobs.trt_build_timeout_s`, exceeded `jobs.trt_build_max_rss_gib`, crashed, or
            the job was cancelled meanwhile.
        InputShapeError, InvalidModelError: the model or its profiles are unusable.
    """
    settings = get_settings()
    gpu, tensorrt_version = _this_gpu(ctx)
    store = LocalArtifactStore(settings.artifacts_dir)
    cache_key = TimingCacheKey.for_gpu(gpu, tensorrt_version)
    options = TrtBuildOptions(
        precision=ctx.config["precision"],
        workspace_bytes=int(settings.jobs.trt_workspace_gib * _GIB),
        log_severity="INFO",
    )
    limits = ChildLimits(timeout_s=settings.jobs.trt_build_timeout_s,
                         max_rss_bytes=int(settings.jobs.trt_build_max_rss_gib * _GIB))
    events_path = out_dir.with_name(f"{out_dir.name}.events.jsonl")
    events_path.unlink(missing_ok=True)  # a fallback rebuild starts a fresh stream
    log_path = build_log_path(out_dir)
    log_path.unlink(missing_ok=True)
    with gpu_lock(ctx, stage):
        timing_cache = load_stored_cache(store, cache_key)  # read under the lock: the freshest
        with BuildEventRelay(events_path, log_path, report=job_reporter(ctx.job_id, stage),
                             label=label, progress_span=progress_span) as relay:
            engine: TrtEngine = run_isolated(
                build_in_child,
                args=(settings.tensorrt_toolkit, model_path, out_dir),
                kwargs={"options": options, "input_shapes": ctx.input_shapes,
                        "profiles": ctx.config.get("profiles"), "timing_cache": timing_cache,
                        "events_path": events_path, "gpu": gpu},
                limits=limits,
                what=f"the {label} of job {ctx.job_id}",
                keep_going=relay.poll,
            )
        save_cache(store, cache_key, engine.timing_cache)
    return engine


def build_in_child(
    toolkit_spec: str | None,
    model_path: Path,
    out_dir: Path,
    *,
    options: TrtBuildOptions,
    input_shapes: Mapping[str, Sequence[int]],
    profiles: Mapping[str, Any] | None,
    timing_cache: bytes | None,
    events_path: Path,
    gpu: GpuInfo,
) -> TrtEngine:
    """The isolated child's work: build with the toolkit, writing progress and log lines to
    `events_path` for the worker to relay."""
    toolkit = load_toolkit(toolkit_spec)
    writer = BuildEventWriter(events_path)
    try:
        return toolkit.build_engine(
            model_path, out_dir, options=options, input_shapes=input_shapes, profiles=profiles,
            timing_cache=timing_cache, on_progress=writer.progress, on_log=writer.log, gpu=gpu)
    finally:
        writer.close()


def gpu_lock(ctx: JobContext, stage: str) -> AbstractContextManager[None]:
    """Hold this worker's GPU exclusively (blocking until free) for job `ctx`: for a build, or
    for timing an engine, which another job's build on the same GPU would slow down. Not
    re-entrant: take it once. While it waits, the job's events (in `stage`) say so."""
    gpu, _ = _this_gpu(ctx)

    def tell_the_job() -> None:
        with session_scope() as session:
            job_state.record_event(session, ctx.job_id, f"waiting for GPU {gpu.name}: another "
                                   "job's TensorRT build or timing is using it", stage=stage)

    # The UUID names the physical GPU whatever CUDA_VISIBLE_DEVICES renumbers it to.
    name = gpu.uuid or str(gpu.index)
    return one_at_a_time(get_settings().locks_dir / f"gpu-{name}.lock", on_wait=tell_the_job)


def model_at_job_precision(ctx: JobContext, model_path: Path) -> Path:
    """`model_path` itself for an fp32 job; else its conversion to the job's precision, saved
    next to it (TensorRT builds strongly typed: the graph must carry the precision)."""
    precision = ctx.config["precision"]
    if precision == "fp32":
        return model_path
    converted, _ = convert_precision(onnx.load(model_path), precision)
    target = model_path.with_name(f"{model_path.stem}.{precision}.onnx")
    onnx.save(converted, target)
    return target


def _this_gpu(ctx: JobContext) -> tuple[GpuInfo, str]:
    """This worker's GPU and TensorRT version.

    Raises:
        EngineBuildError: this worker cannot build TensorRT engines (it says what it has).
    """
    capabilities = detect_worker_capabilities()
    why = refusal_for(ctx.config, capabilities)
    if why is not None or capabilities.gpu is None or capabilities.tensorrt_version is None:
        raise EngineBuildError(why or "this worker cannot build TensorRT engines")
    return capabilities.gpu, capabilities.tensorrt_version
