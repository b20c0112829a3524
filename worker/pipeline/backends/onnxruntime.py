"""The ONNX Runtime backend of a job: an ORT-optimized model and its manifest
(optimizer/backends/onnxruntime/), timed against the original at ORT's default level (and with
its optimizations off, as a second variant)."""

import shutil
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NoReturn

from core.job_config import DEFAULT_ORT_LEVEL
from core.reports import EngineReport
from optimizer.backends.onnxruntime.build import (
    OrtBuildOptions,
    OrtEngine,
    build_ort_engine,
    runner_for_engine,
)
from optimizer.backends.onnxruntime.original import original_as_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import Runner
from optimizer.errors import InternalError
from optimizer.measure.ablation import RunnerFor, onnxruntime_stage_runner
from optimizer.registries.backends import Backend
from worker.pipeline.backends.base import BenchmarkReference, NodeProfiles, SweepEngine
from worker.pipeline.backends.fallbacks import onnxruntime_fallbacks
from worker.pipeline.backends.ort_profile import ort_node_profiles
from worker.pipeline.backends.ort_sweep import ort_sweep_engine
from worker.pipeline.results import (
    Attempt,
    BuiltEngine,
    JobRun,
    LoadedModel,
    OptimizedModel,
    PendingArtifact,
    Validation,
)
from worker.pipeline.stages import ProgressSpan

__all__ = ["OnnxRuntimeBackend"]


class OnnxRuntimeBackend:
    name = Backend.ONNXRUNTIME
    # The upload at ORT's default level: what its user runs today.
    original_backend: Backend | None = Backend.ONNXRUNTIME

    def __init__(self, run: JobRun) -> None:
        self._run = run
        self.own_optimizations = (
            f"ONNX Runtime's own '{run.config.ort_optimization_level}' optimizations")

    def build_engine(self, loaded: LoadedModel, optimized: OptimizedModel, attempt: Attempt,
                     span: ProgressSpan) -> BuiltEngine[OrtEngine]:
        engine_dir = self._fresh_engine_dir()
        options = OrtBuildOptions(optimization_level=attempt.ort_level or DEFAULT_ORT_LEVEL,
                                  intra_op_threads=self._run.config.cpu_threads,
                                  flush_denormals=self._run.config.ort_flush_denormals)
        engine = build_ort_engine(optimized.engine_source, engine_dir, options=options,
                                  input_shapes=loaded.input_shapes,
                                  keep_inputs_dynamic=loaded.inputs_left_dynamic is not None)
        report = (None if loaded.inputs_left_dynamic is None
                  else EngineReport(inputs_left_dynamic=loaded.inputs_left_dynamic))
        return BuiltEngine(engine, report=report, attempt=attempt, artifacts=_artifacts(engine))

    def original_engine(self, loaded: LoadedModel) -> BuiltEngine[OrtEngine]:
        """The upload's own bytes as engine.onnx, loaded at ONNX Runtime's default level with
        the job's threads (the benchmark's "original"), its data file beside it if it has any."""
        engine = original_as_engine(self._run.model_path, self._fresh_engine_dir(),
                                    intra_op_threads=self._run.config.cpu_threads,
                                    input_shapes=loaded.input_shapes)
        return BuiltEngine(engine, attempt=Attempt.the_original(), artifacts=_artifacts(engine))

    def _fresh_engine_dir(self) -> Path:
        engine_dir = self._run.scratch_dir / "engine"
        shutil.rmtree(engine_dir, ignore_errors=True)  # a fallback rebuild replaces the engine
        engine_dir.mkdir()
        return engine_dir

    def open_runner(self, engine: BuiltEngine[OrtEngine]) -> AbstractContextManager[Runner]:
        return runner_for_engine(engine.engine.manifest_path)

    def precision_runner(self, engine: BuiltEngine[OrtEngine]
                         ) -> AbstractContextManager[Runner | None]:
        return nullcontext()  # ORT's CPU kernels compute in fp32: emulate instead

    def benchmark_reference(self, loaded: LoadedModel, span: ProgressSpan) -> BenchmarkReference:
        """The uploaded model as its user runs it today: at ONNX Runtime's default level, with
        the engine's threads; and with every optimization off, as "original_unoptimized"."""
        threads = self._run.config.cpu_threads
        return BenchmarkReference(
            open=lambda: OnnxRuntimeRunner(self._run.model_path, optimization_level="all",
                                           intra_op_threads=threads),
            unoptimized=lambda: OnnxRuntimeRunner(self._run.model_path,
                                                  optimization_level="disabled",
                                                  intra_op_threads=threads))

    def sweep_engine(self, loaded: LoadedModel, engine: BuiltEngine[OrtEngine],
                     batch: int) -> SweepEngine | str:
        """The engine rebuilt at batch size `batch` (see worker/pipeline/backends/ort_sweep.py)."""
        return ort_sweep_engine(self._run, loaded, engine, batch,
                                open_built=lambda: self.open_runner(engine))

    def node_profiles(self, loaded: LoadedModel, optimized: OptimizedModel,
                      engine: BuiltEngine[OrtEngine], feed: dict[str, Any]) -> NodeProfiles:
        return ort_node_profiles(self._run, loaded, optimized, engine, feed)

    def timing_lock(self) -> AbstractContextManager[None]:
        return nullcontext()

    def ablation_runner_for(self, loaded: LoadedModel, span: ProgressSpan) -> RunnerFor:
        return onnxruntime_stage_runner

    def fallback_attempts(self, blamed: tuple[str, ...]) -> list[Attempt]:
        return onnxruntime_fallbacks(self._run.config, blamed)

    def raise_no_attempt_passed(self, last: Validation) -> NoReturn:
        # Never reached: with an original_backend the pipeline ships the original instead.
        raise InternalError("an onnxruntime job ran out of fallback attempts without shipping "
                            "the original")


def _artifacts(engine: OrtEngine) -> tuple[PendingArtifact, ...]:
    data = (() if engine.data_path is None else
            (PendingArtifact(engine.data_path.name, "engine_data", engine.data_path),))
    return (PendingArtifact("engine.onnx", "engine", engine.model_path), *data,
            PendingArtifact("manifest.json", "manifest", engine.manifest_path))
