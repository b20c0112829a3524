"""TensorRT engine builds for one job on this worker's GPU: one build at a time per GPU, in a
child process under the job settings' time and memory limits, starting from the stored timing
cache and storing it back, with the builder's progress and log relayed to the job
(worker/gpu/build_events.py).

    builds = EngineBuilds(job_id=..., settings=..., store=..., gpu=..., ...)
    engine = builds.build(source, scratch / "engine", input_shapes=shapes,
                          label="TensorRT build", stage="build_engine", progress_span=(0.2, 0.4))

A build that crashes, hangs or runs out of memory fails the job with an `EngineBuildError` that
says so; the worker process is untouched. A cancelled job stops its build within a second.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from core.isolation import ChildLimits, run_isolated
from core.settings import Settings
from core.storage import ArtifactStore
from optimizer.backends.tensorrt import (
    QUANTIZED_JOB_REFERENCE,
    TimingCacheKey,
    TrtBuildOptions,
    TrtEngine,
)
from optimizer.backends.tensorrt.toolkit import load_toolkit
from optimizer.capabilities import GpuInfo
from optimizer.model.external_data import external_tensors
from optimizer.model.file import write_model_file
from optimizer.precision import convert_precision
from optimizer.registries.precisions import PRECISIONS, REFERENCE_PRECISION, Precision
from worker.gpu.build_events import BuildEventRelay, BuildEventWriter, JobChannel
from worker.gpu.file_lock import one_at_a_time
from worker.gpu.timing_caches import load_stored_cache, save_cache

__all__ = ["EngineBuilds", "build_in_child", "build_log_path"]

_GIB = 2**30


def _ignore(_: bool) -> None:
    return None


def build_log_path(out_dir: Path) -> Path:
    """Where the build's full log (INFO and above) is written, next to `out_dir`."""
    return out_dir.with_name(f"{out_dir.name}.build.log")


@dataclass(frozen=True)
class EngineBuilds:
    """Builds the engines of job `job_id` (the job's precision and profiles) on `gpu`."""

    job_id: uuid.UUID
    settings: Settings
    store: ArtifactStore  # holds the timing caches
    channel: JobChannel  # the job's events and progress
    gpu: GpuInfo
    tensorrt_version: str
    precision: Precision | None  # None: fp32
    profiles: Mapping[str, Any] | None
    on_gpu_wait: Callable[[bool], None] = _ignore  # the job waits for the GPU (True), or has it

    def build(self, model_path: Path, out_dir: Path, *, input_shapes: Mapping[str, Sequence[int]],
              label: str, stage: str, progress_span: tuple[float, float],
              precision: Precision | None = None) -> TrtEngine:
        """Build `model_path` into `out_dir`; the builder's progress moves the job's within
        `progress_span`, its warnings become job events in `stage` prefixed by `label`.
        `precision`: the one `model_path` carries when it is not the job's (an int8 job's
        fp16 reference, or the fp32 model it ships when int8 did not pay).

        Raises:
            EngineBuildError: the build failed, ran past `jobs.trt_build_timeout_s`, exceeded
                `jobs.trt_build_max_rss_gib`, crashed, or the job was cancelled meanwhile.
            InputShapeError, InvalidModelError: the model or its profiles are unusable.
        """
        jobs = self.settings.jobs
        cache_key = TimingCacheKey.for_gpu(self.gpu, self.tensorrt_version)
        options = TrtBuildOptions(precision=precision or self.precision or REFERENCE_PRECISION,
                                  workspace_bytes=int(jobs.trt_workspace_gib * _GIB),
                                  log_severity="INFO")
        limits = ChildLimits(timeout_s=jobs.trt_build_timeout_s,
                             max_rss_bytes=int(jobs.trt_build_max_rss_gib * _GIB))
        events_path = out_dir.with_name(f"{out_dir.name}.events.jsonl")
        events_path.unlink(missing_ok=True)  # a fallback rebuild starts a fresh stream
        log_path = build_log_path(out_dir)
        log_path.unlink(missing_ok=True)
        with self.gpu_lock(stage):
            timing_cache = load_stored_cache(self.store, cache_key)  # under the lock: the freshest
            with BuildEventRelay(events_path, log_path, report=self.channel.reporter(stage),
                                 label=label, progress_span=progress_span) as relay:
                engine: TrtEngine = run_isolated(
                    build_in_child,
                    args=(self.settings.tensorrt_toolkit, model_path, out_dir),
                    kwargs={"options": options, "input_shapes": input_shapes,
                            "profiles": self.profiles, "timing_cache": timing_cache,
                            "events_path": events_path, "gpu": self.gpu},
                    limits=limits,
                    what=f"the {label} of job {self.job_id}",
                    keep_going=relay.poll,
                )
            save_cache(self.store, cache_key, engine.timing_cache)
        return engine

    @contextmanager
    def gpu_lock(self, stage: str) -> Iterator[None]:
        """Hold this worker's GPU exclusively (blocking until free): for a build, or for timing
        an engine, which another job's build on the same GPU would slow down. Not re-entrant:
        take it once. While it waits, the job's events (in `stage`) say so, and `on_gpu_wait`
        hears True, then False once the GPU is ours."""
        waited = False

        def tell_the_job() -> None:
            nonlocal waited
            waited = True
            self.on_gpu_wait(True)
            self.channel.event(f"waiting for GPU {self.gpu.name}: another job's TensorRT build "
                               "or timing is using it", stage)

        # The UUID names the physical GPU whatever CUDA_VISIBLE_DEVICES renumbers it to.
        name = self.gpu.uuid or str(self.gpu.index)
        with one_at_a_time(self.settings.locks_dir / f"gpu-{name}.lock", on_wait=tell_the_job):
            if waited:
                self.on_gpu_wait(False)
            yield

    @property
    def reference_precision(self) -> Precision | None:
        """The precision unfused reference engines are built at: the job's, except that an int8
        job is compared with fp16, what a GPU user runs without calibration data."""
        if self.precision is not None and PRECISIONS[self.precision].quantizes:
            return QUANTIZED_JOB_REFERENCE
        return self.precision

    def at_job_precision(self, model_path: Path) -> Path:
        """`model_path` itself for an fp32 job; else its conversion to `reference_precision`,
        saved next to it (TensorRT builds strongly typed: the graph must carry the precision)."""
        precision = self.reference_precision
        if precision is None:
            return model_path
        converted, _ = convert_precision(onnx.load(model_path), precision)
        target = model_path.with_name(f"{model_path.stem}.{precision}.onnx")
        # A source with data files (a model over 2 GB) gets a converted copy with its own.
        external = any(external_tensors(onnx.load(model_path, load_external_data=False)))
        write_model_file(converted, target,
                         data_location=f"{target.name}.data" if external else None)
        return target


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
