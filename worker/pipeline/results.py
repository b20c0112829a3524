"""What each stage of a job run hands to the next, and what the run records in the end.

Stages return these frozen results instead of filling in a shared bag, so a stage can only run
once what it needs exists. `JobOutcome` gathers what gets recorded, success or failure.
"""

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from core.job_config import JobConfig, OrtLevel
from core.settings import Settings
from core.storage import ArtifactStore
from optimizer.benchmark import BenchmarkResult
from optimizer.fusion_report import FusionReport
from optimizer.input_ranges import InputRange
from optimizer.optimize import OptimizeOptions
from optimizer.tensor_specs import TensorSpec
from optimizer.validation import ValidationReport

if TYPE_CHECKING:
    from worker.pipeline.benchmark_context import BenchmarkContext

__all__ = [
    "Attempt",
    "BuiltEngine",
    "JobOutcome",
    "JobRun",
    "LoadedModel",
    "OptimizedModel",
    "PendingArtifact",
    "Validation",
]

EngineT = TypeVar("EngineT")


@dataclass(frozen=True)
class JobRun:
    """One run of one job, built once by the task: what every stage may read."""

    job_id: uuid.UUID
    config: JobConfig
    model_path: Path  # the uploaded model, read-only
    dataset_path: Path | None  # the job's validation dataset (.npz), if it names one
    scratch_dir: Path  # this run's working folder, removed when it ends
    settings: Settings
    store: ArtifactStore
    worker: str | None = None  # the worker that claimed it ("host:pid"), for the records
    memory_bandwidth_gb_s: float | None = None  # the worker's, measured when it started

    @property
    def ort_check_level(self) -> OrtLevel:
        """The ONNX Runtime level the models this run writes must load at
        (`model_writer.save_model`): the engine's for an onnxruntime job; "disabled" for a
        tensorrt job, whose models ONNX Runtime only runs as the reference and the emulated
        engine, at that level."""
        if self.config.backend == "onnxruntime":
            return self.config.ort_optimization_level or "all"
        return "disabled"


@dataclass(frozen=True)
class PendingArtifact:
    """A file in the scratch folder that becomes an artifact if the job succeeds."""

    name: str
    kind: str
    path: Path


@dataclass(frozen=True)
class LoadedModel:
    """The model at the job's shapes, and the inputs it is validated on (stage `load`)."""

    static_path: Path  # every input fixed at the job's input_shapes: the reference's shapes
    # tensorrt jobs with profiles: the profiled dims left dynamic, what the engine is built from
    profiled_path: Path | None
    input_shapes: dict[str, tuple[int, ...]]
    input_specs: tuple[TensorSpec, ...]  # the model's inputs at the job's shapes
    feeds: list[dict[str, np.ndarray]]  # the dataset's samples, else seeded random inputs
    labels: np.ndarray | None  # the dataset's class labels, when it has them
    # Where random feeds are drawn: the job's input_ranges, else inferred from the graph.
    input_ranges: dict[str, InputRange] = field(default_factory=dict)
    # onnxruntime jobs whose model ONNX Runtime cannot load at the engine's level once its
    # inputs are fixed (control flow whose unused branches only type-check at other shapes):
    # why, and the engine is then fused and built from the upload, its inputs left dynamic.
    inputs_left_dynamic: str | None = None
    dynamic_path: Path | None = None

    @property
    def fusion_source(self) -> Path:
        """The model the passes rewrite and engines are built from."""
        return self.profiled_path or self.dynamic_path or self.static_path

    @property
    def batch_size(self) -> int:
        """The leading dim of the first input is the batch by convention; a scalar means 1."""
        first_shape = next(iter(self.input_shapes.values()), ())
        return first_shape[0] if first_shape else 1


@dataclass(frozen=True)
class Attempt:
    """The rewrites one optimize → build → validate round uses. The first is the job's own;
    a fallback after a validation failure tries more conservative ones (pipeline/attempts.py)."""

    kept: str  # what this attempt keeps, for the accuracy report and the stage events
    passes: str | list[str]
    excluded_rules: tuple[str, ...] = ()
    ort_level: OrtLevel | None = None  # ONNX Runtime's level for the engine; None on TensorRT

    @classmethod
    def the_jobs_own(cls, config: JobConfig) -> "Attempt":
        return cls(kept="the job's passes", passes=config.passes,
                   ort_level=config.ort_optimization_level)

    def optimize_options(self, backend: str) -> OptimizeOptions:
        return OptimizeOptions(backend=backend, passes=self.passes,
                               excluded_rules=self.excluded_rules)


@dataclass(frozen=True)
class OptimizedModel:
    """Stage `optimize`: the fused model, and the graph the engine is built from."""

    fused_path: Path
    fusion_report: FusionReport
    engine_source: Path  # the fused model, converted to the job's precision when not fp32
    accuracy: dict[str, Any]  # the precision conversion's (and search's) report, if any
    artifacts: tuple[PendingArtifact, ...]


@dataclass(frozen=True)
class BuiltEngine(Generic[EngineT]):
    """Stage `build_engine`: the backend's engine and its files."""

    engine: EngineT
    artifacts: tuple[PendingArtifact, ...]
    report: dict[str, Any] | None = None  # tensorrt: metadata + TensorRT's layer summary
    attempt: Attempt | None = None  # what it was built with (an onnxruntime sweep rebuilds it)


@dataclass(frozen=True)
class Validation:
    """Stage `validate`: the verdict on the engine against the original model."""

    report: ValidationReport
    accuracy: dict[str, Any]  # how it was judged (e.g. precision evaluation)
    subject: str  # what was judged, for the error message: "the engine of job ..."

    @property
    def passed(self) -> bool:
        return self.report.passed


@dataclass
class JobOutcome:
    """What the run records: with `succeeded`, or with a failure (whatever exists by then)."""

    artifacts: dict[str, PendingArtifact] = field(default_factory=dict)  # by name: reruns replace
    fusion_report: FusionReport | None = None
    engine_report: dict[str, Any] | None = None
    validation: ValidationReport | None = None
    accuracy: dict[str, Any] = field(default_factory=dict)  # verdicts, bisection, fallback...
    benchmarks: list[BenchmarkResult] = field(default_factory=list)
    ablation: list[BenchmarkResult] = field(default_factory=list)
    sweep: list[BenchmarkResult] = field(default_factory=list)  # original and engine per batch
    # where the benchmarks ran and what they moved, for every record (pipeline/benchmark_context)
    benchmark_context: "BenchmarkContext | None" = None

    def add_artifacts(self, artifacts: tuple[PendingArtifact, ...]) -> None:
        self.artifacts.update((artifact.name, artifact) for artifact in artifacts)
