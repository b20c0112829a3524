"""The OpenVINO backend of a job: the IR OpenVINO users deploy and its manifest
(optimizer/backends/openvino/), compiled for the CPU at the job's precision (f32 or bf16 through
the inference precision hint) and threads, timed against what its user has today: the original
at ONNX Runtime's default level with the job's threads (ONNX Runtime's own reference, reused).

When no engine beats the original (every attempt fails validation, or the engine measures
slower), the original ships, as on ONNX Runtime: the upload at ONNX Runtime's default level, an
ONNX Runtime engine (engine.onnx and its manifest) rather than an IR, since that is what the
yardstick timed and what the user already runs. `open_runner` opens either kind of engine.
"""

import shutil
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NoReturn

from core.reports import EngineReport
from optimizer.backends.onnxruntime.build import OrtEngine
from optimizer.backends.onnxruntime.build import runner_for_engine as ort_runner_for_engine
from optimizer.backends.openvino.build import (
    OvBuildOptions,
    OvEngine,
    build_ov_engine,
    runner_for_engine,
)
from optimizer.backends.openvino.runner import OpenVinoRunner, inference_precision_of
from optimizer.backends.runner import Runner
from optimizer.capabilities import HostCapabilities
from optimizer.errors import EngineBuildError, InternalError
from optimizer.measure.ablation import RunnerFor
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import PRECISIONS
from worker.pipeline.backends.base import BenchmarkReference, NodeProfiles, SweepEngine
from worker.pipeline.backends.fallbacks import unfused_fallbacks
from worker.pipeline.backends.onnxruntime import OnnxRuntimeBackend
from worker.pipeline.backends.ov_profile import openvino_node_profiles
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

__all__ = ["OpenVinoBackend"]

# Its engine, or the original shipped as ONNX Runtime's (`original_engine`).
Engine = OvEngine | OrtEngine


class OpenVinoBackend:
    name = Backend.OPENVINO
    own_optimizations = "OpenVINO's own graph transformations"
    # The upload at ORT's default level, what its user runs today (`original_engine`).
    original_backend: Backend | None = OnnxRuntimeBackend.original_backend

    def __init__(self, run: JobRun, *, capabilities: HostCapabilities) -> None:
        """Raises EngineBuildError when this host cannot run the job: no OpenVINO (or NNCF),
        or a CPU without the kernels of the job's precision (bf16 without AVX512_BF16 or
        AMX), saying why."""
        spec = BACKENDS[Backend.OPENVINO]
        if not spec.runs_on(capabilities):
            raise EngineBuildError(
                f"this worker cannot run OpenVINO jobs: it needs {spec.host_needs} (its "
                f"capabilities: {capabilities.describe()})")
        refusal = PRECISIONS[run.config.precision].cpu_refusal(capabilities.cpu_flags)
        if refusal is not None:
            raise EngineBuildError(f"precision: {refusal}. Use fp32, or a worker whose CPU "
                                   "has them.")
        self._run = run
        self._inference_precision = inference_precision_of(run.config.precision)
        # The original, its reference and its ablation runner are ONNX Runtime's.
        self._onnxruntime = OnnxRuntimeBackend(run)

    def build_engine(self, loaded: LoadedModel, optimized: OptimizedModel, attempt: Attempt,
                     span: ProgressSpan) -> BuiltEngine[Engine]:
        engine_dir = self._fresh_engine_dir()
        options = OvBuildOptions(precision=optimized.engine_precision or self._run.config.precision,
                                 threads=self._run.config.cpu_threads)
        engine = build_ov_engine(optimized.engine_source, engine_dir, options=options,
                                 input_shapes=loaded.input_shapes,
                                 keep_inputs_dynamic=loaded.inputs_left_dynamic is not None)
        report = (None if loaded.inputs_left_dynamic is None
                  else EngineReport(inputs_left_dynamic=loaded.inputs_left_dynamic))
        return BuiltEngine(engine, report=report, attempt=attempt, artifacts=_artifacts(engine))

    def original_engine(self, loaded: LoadedModel) -> BuiltEngine[Engine]:
        """The upload unchanged at ONNX Runtime's default level, with the job's threads: the
        benchmark's original (OnnxRuntimeBackend's; this job's IR files give way to it)."""
        original = self._onnxruntime.original_engine(loaded)
        return BuiltEngine(original.engine, attempt=original.attempt,
                           artifacts=original.artifacts)

    def _fresh_engine_dir(self) -> Path:
        engine_dir = self._run.scratch_dir / "engine"
        shutil.rmtree(engine_dir, ignore_errors=True)  # a fallback rebuild replaces the engine
        engine_dir.mkdir()
        return engine_dir

    def open_runner(self, engine: BuiltEngine[Engine]) -> AbstractContextManager[Runner]:
        if isinstance(engine.engine, OrtEngine):  # the original, shipped
            return ort_runner_for_engine(engine.engine.manifest_path)
        return runner_for_engine(engine.engine.manifest_path)

    def precision_runner(self, engine: BuiltEngine[Engine]
                         ) -> AbstractContextManager[Runner | None]:
        """The engine itself: OpenVINO computes bf16 natively, so validation judges the real
        bf16 engine, not an emulation."""
        return self.open_runner(engine)

    def benchmark_reference(self, loaded: LoadedModel, span: ProgressSpan) -> BenchmarkReference:
        """ONNX Runtime's: the upload at ONNX Runtime's default level with the job's threads
        (what its user has), and with every optimization off as "original_unoptimized"."""
        return self._onnxruntime.benchmark_reference(loaded, span)

    def sweep_engine(self, loaded: LoadedModel, engine: BuiltEngine[Engine],
                     batch: int) -> SweepEngine | str:
        """The engine's IR reshaped to batch size `batch` (OpenVINO reshapes an IR whose shape
        computations it kept), or why not."""
        if isinstance(engine.engine, OrtEngine):
            return self._onnxruntime.sweep_engine(loaded, engine, batch)  # type: ignore[arg-type]
        built = engine.engine
        first = next(iter(loaded.input_shapes), None)
        if first is None:
            return "the model has no input to batch"
        shapes = {name: (batch, *shape[1:]) if name == first else shape
                  for name, shape in loaded.input_shapes.items()}
        if batch == loaded.batch_size:
            return SweepEngine(input_shapes=shapes, open=lambda: self.open_runner(engine))
        try:
            OpenVinoRunner(built.model_path, inference_precision=self._inference_precision,
                           threads=self._run.config.cpu_threads, input_shapes=shapes).close()
        except EngineBuildError as err:
            return f"OpenVINO cannot reshape the engine to batch size {batch} ({err})"
        return SweepEngine(input_shapes=shapes, open=lambda: OpenVinoRunner(
            built.model_path, inference_precision=self._inference_precision,
            threads=self._run.config.cpu_threads, input_shapes=shapes))

    def node_profiles(self, loaded: LoadedModel, optimized: OptimizedModel,
                      engine: BuiltEngine[Engine], feed: dict[str, Any]) -> NodeProfiles | str:
        if isinstance(engine.engine, OrtEngine):
            return "the original ships as ONNX Runtime's: it has no OpenVINO layers to profile"
        return openvino_node_profiles(self._run, loaded, optimized, engine.engine, feed)

    def timing_lock(self) -> AbstractContextManager[None]:
        return nullcontext()

    def ablation_runner_for(self, loaded: LoadedModel, span: ProgressSpan) -> RunnerFor:
        """Each ablation stage's model compiled by OpenVINO at the job's precision and threads
        (it reads the ONNX file itself)."""
        precision, threads = self._inference_precision, self._run.config.cpu_threads

        def stage_runner(stage_model: Path) -> AbstractContextManager[Runner]:
            return OpenVinoRunner(stage_model, inference_precision=precision, threads=threads)

        return stage_runner

    def fallback_attempts(self, blamed: tuple[str, ...]) -> list[Attempt]:
        return unfused_fallbacks(self._run.config, blamed,
                                 unfused="no fusion passes: OpenVINO's engine of the unfused model")

    def raise_no_attempt_passed(self, last: Validation) -> NoReturn:
        # Never reached: with an original_backend the pipeline ships the original instead.
        raise InternalError("an openvino job ran out of fallback attempts without shipping the "
                            "original")


def _artifacts(engine: OvEngine) -> tuple[PendingArtifact, ...]:
    return (PendingArtifact(engine.model_path.name, "engine", engine.model_path),
            PendingArtifact(engine.weights_path.name, "engine_data", engine.weights_path),
            PendingArtifact(engine.manifest_path.name, "manifest", engine.manifest_path))
