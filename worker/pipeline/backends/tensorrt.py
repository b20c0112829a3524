"""The TensorRT backend of a job: engines built in isolated children on this worker's GPU
(worker/gpu/engine_builds.py), run through the TensorRT toolkit, and timed against TensorRT's
engine of the unfused model, so the benchmark shows what our fusions add to TensorRT's own at
the same precision on the same GPU (timing a GPU engine against ONNX Runtime on the CPU would
say nothing about fusion)."""

import json
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import onnx

from core.reports import EngineReport
from optimizer.backends.runner import Runner
from optimizer.backends.tensorrt import ENGINE_FILE, METADATA_FILE, REPORT_FILE, TrtEngine
from optimizer.backends.tensorrt.inspector import parse_engine_information
from optimizer.backends.tensorrt.toolkit import TensorRTToolkit
from optimizer.capabilities import HostCapabilities
from optimizer.errors import EngineBuildError, InternalError
from optimizer.measure.ablation import RunnerFor
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios
from optimizer.quantization.node_precision import tensorrt_node_precisions
from optimizer.registries.backends import Backend
from optimizer.registries.precisions import PRECISIONS, Precision
from worker.gpu.engine_builds import EngineBuilds, build_log_path
from worker.pipeline.advice import failure_advice
from worker.pipeline.backends.base import BenchmarkReference, NodeProfiles, SweepEngine
from worker.pipeline.backends.fallbacks import tensorrt_fallbacks
from worker.pipeline.backends.trt_profile import ReferenceEngine, tensorrt_node_profiles
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import (
    Attempt,
    BuiltEngine,
    JobRun,
    LoadedModel,
    OptimizedModel,
    PendingArtifact,
    Validation,
)
from worker.pipeline.stages import ABLATION, BENCHMARK, BUILD_ENGINE, ProgressSpan

__all__ = ["TensorRTBackend", "refusal_for"]


def refusal_for(capabilities: HostCapabilities) -> str | None:
    """Why this host cannot build TensorRT engines, or None if it can (a job reaching a worker
    started with a hand-written queue list fails up front, saying what is missing)."""
    if capabilities.can_build_tensorrt:
        return None
    return (
        f"backend 'tensorrt' needs a worker with an NVIDIA GPU and TensorRT; this worker has "
        f"{capabilities.describe()}. Start one with `fuseforge worker --queues gpu` on a GPU "
        f"machine, or use backend 'onnxruntime'."
    )


class TensorRTBackend:
    name = Backend.TENSORRT
    own_optimizations = "TensorRT's own optimizations"
    # An ONNX file is no TensorRT engine: the report says slower instead.
    original_backend: Backend | None = None

    def __init__(self, run: JobRun, *, toolkit: TensorRTToolkit, capabilities: HostCapabilities,
                 recorder: JobRecorder, on_gpu_wait: Callable[[bool], None]) -> None:
        """Raises EngineBuildError when this host cannot build TensorRT engines."""
        why = refusal_for(capabilities)
        if why is not None or capabilities.gpu is None or capabilities.tensorrt_version is None:
            raise EngineBuildError(why or "this worker cannot build TensorRT engines")
        refusal = PRECISIONS[run.config.precision].gpu_refusal(
            capabilities.gpu.compute_capability)
        if refusal is not None:
            raise EngineBuildError(f"precision: {refusal} ({capabilities.gpu.name}).")
        self._run = run
        self._toolkit = toolkit
        self._gpu = capabilities.gpu
        self._reference: ReferenceEngine | None = None  # built by benchmark_reference
        precision = run.config.precision
        self._builds = EngineBuilds(
            job_id=run.job_id, settings=run.settings, store=run.store, channel=recorder,
            gpu=capabilities.gpu, tensorrt_version=capabilities.tensorrt_version,
            precision=precision if PRECISIONS[precision].rewrites else None,
            profiles=run.config.profile_shapes(), on_gpu_wait=on_gpu_wait,
        )

    def build_engine(self, loaded: LoadedModel, optimized: OptimizedModel, attempt: Attempt,
                     span: ProgressSpan) -> BuiltEngine[TrtEngine]:
        engine_dir = self._run.scratch_dir / "engine"
        shutil.rmtree(engine_dir, ignore_errors=True)  # a fallback rebuild replaces the engine
        quantized = optimized.engine_precision is None \
            and PRECISIONS[self._run.config.precision].quantizes
        engine = self._builds.build(optimized.engine_source, engine_dir,
                                    input_shapes=loaded.input_shapes, label="TensorRT build",
                                    stage=BUILD_ENGINE,
                                    progress_span=(span.part(0, 0.5) if quantized else span
                                                   ).as_tuple(),
                                    precision=optimized.engine_precision)
        choice: dict[str, Any] | None = None
        if quantized:
            engine, choice = self._faster_than_fp16(loaded, optimized, engine, span.part(0.5, 1))
            quantized = choice.get("shipped") is None
        artifacts = [PendingArtifact(ENGINE_FILE, "engine", engine.engine_path),
                     PendingArtifact(METADATA_FILE, "manifest", engine.metadata_path),
                     PendingArtifact(REPORT_FILE, "report", engine.report_path)]
        log_path = build_log_path(engine_dir)
        if log_path.is_file():
            artifacts.append(PendingArtifact("build.log", "log", log_path))
        return BuiltEngine(engine, artifacts=tuple(artifacts),
                           report=EngineReport(metadata=engine.metadata.to_dict(),
                                              layers=engine.report),
                           node_precisions=self._node_precisions(optimized, engine)
                           if quantized else None,
                           quantization=choice)

    def _faster_than_fp16(self, loaded: LoadedModel, optimized: OptimizedModel,
                          engine: TrtEngine, span: ProgressSpan
                          ) -> tuple[TrtEngine, dict[str, Any]]:
        """The quantized engine when it beats the fp16 engine of the same fused model beyond
        its interval, else that fp16 engine, with the timing and the verdict for the job's
        quantization report (the GPU's version of the CPU search's "never slower")."""
        out_dir = self._run.scratch_dir / "engine-fp16"
        shutil.rmtree(out_dir, ignore_errors=True)
        fp16 = self._builds.build(
            self._builds.at_job_precision(optimized.fused_path), out_dir,
            input_shapes=loaded.input_shapes, stage=BUILD_ENGINE,
            label="TensorRT build of the fused model at fp16 (what the quantized engine must beat)",
            progress_span=span.as_tuple(), precision=Precision.FP16)
        feed = loaded.feeds[0]
        with self._builds.gpu_lock(BUILD_ENGINE), self._open(fp16) as baseline, \
                self._open(engine) as candidate:
            speed = interleaved_call_ratios([partial(baseline.infer, feed),
                                             partial(candidate.infer, feed)])[1]
        return (engine, {"versus_fp16": speed.to_dict()}) if speed.faster \
            else (fp16, {"versus_fp16": speed.to_dict(), "shipped": str(Precision.FP16),
                         "why": _fp16_ships(self._run.config.precision, speed)})

    def _node_precisions(self, optimized: OptimizedModel, engine: TrtEngine
                         ) -> dict[str, Any]:
        """A quantized engine's per-node precisions, from TensorRT's inspector report."""
        inspector = json.loads(engine.report_path.read_text()).get("inspector") or {}
        layers = parse_engine_information(json.dumps(inspector)).layers
        return tensorrt_node_precisions(onnx.load(optimized.fused_path), layers).to_dict()

    def open_runner(self, engine: BuiltEngine[TrtEngine]) -> AbstractContextManager[Runner]:
        return self._open(engine.engine)

    def precision_runner(self, engine: BuiltEngine[TrtEngine]
                         ) -> AbstractContextManager[Runner | None]:
        return self._open(engine.engine)  # the engine computes at the job's precision

    def benchmark_reference(self, loaded: LoadedModel, span: ProgressSpan) -> BenchmarkReference:
        """TensorRT's engine of the job's model without our passes (converted to the job's
        precision the same way when it is not fp32), in scratch/reference-engine."""
        source = self._builds.at_job_precision(loaded.fusion_source)
        out_dir = self._run.scratch_dir / "reference-engine"
        shutil.rmtree(out_dir, ignore_errors=True)
        engine = self._builds.build(source, out_dir, input_shapes=loaded.input_shapes,
                                    label="TensorRT build of the unfused model", stage=BENCHMARK,
                                    progress_span=span.as_tuple(),
                                    precision=self._builds.reference_precision)
        self._reference = ReferenceEngine(engine, source)  # profiled after the benchmark
        return BenchmarkReference(open=lambda: self._open(engine),
                                  engine_metadata=engine.metadata.to_dict())

    def sweep_engine(self, loaded: LoadedModel, engine: BuiltEngine[TrtEngine],
                     batch: int) -> SweepEngine | str:
        """The job's own engine, where its profiles let the batch (axis 0) vary over `batch`:
        the reference engine was built from the same profiled model, so it runs there too."""
        profiles = self._run.config.profile_shapes() or {}
        varying = {name: profile for name, profile in profiles.items()
                   if profile["min"][0] != profile["max"][0]}
        if not varying:
            return (f"the engine is built for batch size {loaded.batch_size} only (give "
                    "optimization profiles whose axis 0 varies to sweep batch sizes)")
        outside = [f"{name} ({profile['min'][0]}..{profile['max'][0]})"
                   for name, profile in varying.items()
                   if not profile["min"][0] <= batch <= profile["max"][0]]
        if outside:
            return f"outside the batch range of the profile of {', '.join(outside)}"
        shapes = {name: (batch, *shape[1:]) if name in varying else shape
                  for name, shape in loaded.input_shapes.items()}
        return SweepEngine(input_shapes=shapes, open=lambda: self.open_runner(engine))

    def node_profiles(self, loaded: LoadedModel, optimized: OptimizedModel,
                      engine: BuiltEngine[TrtEngine], feed: dict[str, Any]) -> NodeProfiles | str:
        """TensorRT's per-layer profile of the engine and of the unfused model's engine (the
        benchmark's reference), each layer mapped to ONNX nodes by the inspector's report."""
        if self._reference is None:
            return "the unfused model's engine was not built (no benchmark ran)"
        return tensorrt_node_profiles(loaded, optimized, engine.engine, self._reference,
                                      feed, open_engine=self._open)

    def timing_lock(self) -> AbstractContextManager[None]:
        return self._builds.gpu_lock(BENCHMARK)

    def ablation_runner_for(self, loaded: LoadedModel, span: ProgressSpan) -> RunnerFor:
        """Build and load the TensorRT engine of each ablation stage's model."""

        def stage_engine_runner(stage_model: Path) -> AbstractContextManager[Runner]:
            stage_model = self._builds.at_job_precision(stage_model)
            engine = self._builds.build(
                stage_model, stage_model.with_suffix(".engine"), input_shapes=loaded.input_shapes,
                label=f"TensorRT build of ablation stage {stage_model.stem}", stage=ABLATION,
                progress_span=span.as_tuple(), precision=self._builds.reference_precision)
            return self._open(engine)

        return stage_engine_runner

    def original_engine(self, loaded: LoadedModel) -> BuiltEngine[TrtEngine]:
        raise InternalError("TensorRT cannot ship the original model as its engine "
                            "(its original_backend is None)")

    def fallback_attempts(self, blamed: tuple[str, ...]) -> list[Attempt]:
        return tensorrt_fallbacks(self._run.config, blamed)

    def raise_no_attempt_passed(self, last: Validation) -> NoReturn:
        last.report.raise_if_failed(
            "TensorRT's engine of the unfused model (so no set of FuseForge rewrites can pass: "
            "the difference is TensorRT's own)",
            advice=failure_advice(self._run.config, last.report))
        raise InternalError("the last fallback attempt passed validation but was reported failed")

    def _open(self, engine: TrtEngine) -> AbstractContextManager[Runner]:
        """A runner on `engine` on this worker's GPU (refused with a clear message if it was
        built for another GPU or TensorRT release)."""
        return self._toolkit.open_runner(engine.metadata_path.parent, gpu=self._gpu)


def _fp16_ships(precision: Precision, speed: LatencyRatio) -> str:
    return (f"the {precision} engine ran at {speed.ratio:.3f}x [{speed.ratio_low:.3f}, "
            f"{speed.ratio_high:.3f}] the time of the fused model's fp16 engine on this GPU: "
            "not faster beyond its interval, so the fp16 engine ships")
