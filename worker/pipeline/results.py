"""What each stage of a job run hands to the next, and what the run records in the end.

Stages return these frozen results instead of filling in a shared bag, so a stage can only run
once what it needs exists. `JobOutcome` gathers what gets recorded, success or failure.
"""

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from core.db.models import BenchmarkSuite
from core.job_config import DEFAULT_ORT_LEVEL, JobConfig, OrtLevel
from core.reports import AccuracyReport, EngineReport, JobReports
from core.settings import Settings
from core.storage import ArtifactStore
from optimizer.fusion_report import FusionReport
from optimizer.measure.benchmark import BenchmarkResult
from optimizer.measure.environment import environment_key
from optimizer.measure.traffic import ModelTraffic
from optimizer.model.input_ranges import InputRange
from optimizer.model.tensor_specs import TensorSpec
from optimizer.optimize import OptimizeOptions
from optimizer.quantization.calibration import CalibrationTable
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import Precision
from optimizer.registries.quantization import CalibrationMethod
from optimizer.validation import ValidationReport

__all__ = [
    "Attempt",
    "BenchmarkContext",
    "BuiltEngine",
    "CalibrationSplit",
    "CalibrationStore",
    "JobOutcome",
    "JobRun",
    "LoadedModel",
    "OptimizedModel",
    "PendingArtifact",
    "StoredArchive",
    "Validation",
]

EngineT = TypeVar("EngineT")

ORIGINAL_KEPT = ("the original model, unchanged, at ONNX Runtime's default level "
                 f"'{DEFAULT_ORT_LEVEL}'")


class CalibrationStore(Protocol):
    """Where an int8 job finds and keeps the calibration tables of its model and dataset."""

    def find(self, method: CalibrationMethod, graph_sha256: str,
             samples: int) -> CalibrationTable | None: ...

    def record(self, table: CalibrationTable) -> None: ...


@dataclass(frozen=True)
class StoredArchive:
    uri: str  # the tar in the artifact store
    folder: Path  # where it is unpacked


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
    attempt: int = 1  # which claim of the job: its artifacts go under jobs/<id>/<attempt>/
    memory_bandwidth_gb_s: float | None = None  # the worker's, measured when it started
    calibration_path: Path | None = None  # an int8 job's calibration dataset (.npz)
    calibrations: CalibrationStore | None = None  # its stored tables (records/calibrations.py)
    # The model came with its data files as a tar (Model.external_data): the stored archive,
    # unpacked before the load stage into the folder `model_path` then lies in.
    model_archive: StoredArchive | None = None

    @property
    def ort_check_level(self) -> OrtLevel:
        """The ONNX Runtime level the models this run writes must load at
        (`model_writer.save_model`), as the job's backend says (`BackendSpec.model_check_level`):
        the engine's where ONNX Runtime runs the engine; "disabled" elsewhere (TensorRT), whose
        models ONNX Runtime only runs as the reference and the emulated engine, at that level."""
        return BACKENDS[self.config.backend].model_check_level(
            self.config.ort_optimization_level)


@dataclass(frozen=True)
class PendingArtifact:
    """A file in the scratch folder that becomes an artifact if the job succeeds."""

    name: str
    kind: str
    path: Path


@dataclass(frozen=True)
class CalibrationSplit:
    """An int8 job's calibration samples (steps/calibration_feeds.py)."""

    calibration: list[dict[str, np.ndarray]]
    # Set when no validation dataset was named: the held-apart samples and their labels.
    validation: list[dict[str, np.ndarray]] | None
    labels: np.ndarray | None
    note: str

    def to_dict(self) -> dict[str, object]:
        return {"calibration_samples": len(self.calibration),
                "validation_samples": None if self.validation is None else len(self.validation),
                "note": self.note}


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
    # An int8 job's calibration samples (and, without dataset_id, where `feeds` came from).
    calibration: CalibrationSplit | None = None
    # what the model holds that is valid but suspect (NaN weights), said as the job's events
    warnings: tuple[str, ...] = ()

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

    @classmethod
    def the_original(cls) -> "Attempt":
        """The user's model unchanged at ONNX Runtime's default level: what ships when nothing
        beats it, on a backend that can ship it (`JobBackend.original_backend`)."""
        return cls(kept=ORIGINAL_KEPT, passes="none", ort_level=DEFAULT_ORT_LEVEL)

    def optimize_options(self, backend: str) -> OptimizeOptions:
        return OptimizeOptions(backend=backend, passes=self.passes,
                               excluded_rules=self.excluded_rules)


@dataclass(frozen=True)
class OptimizedModel:
    """Stage `optimize`: the fused model, and the graph the engine is built from."""

    fused_path: Path
    fusion_report: FusionReport
    engine_source: Path  # the fused model, converted to the job's precision when not fp32
    accuracy: AccuracyReport  # the precision conversion's (and search's) report, if any
    artifacts: tuple[PendingArtifact, ...]
    # The precision engine_source carries when it is not the job's: an int8 job that ships
    # its fp32 model (int8 out of budget or not faster); None: the job's precision.
    engine_precision: Precision | None = None


@dataclass(frozen=True)
class BuiltEngine(Generic[EngineT]):
    """Stage `build_engine`: the backend's engine and its files."""

    engine: EngineT
    artifacts: tuple[PendingArtifact, ...]
    report: EngineReport | None = None  # tensorrt: metadata + TensorRT's layer summary
    attempt: Attempt | None = None  # what it was built with (an onnxruntime sweep rebuilds it)
    # int8 engines the backend reports itself (TensorRT's inspector): each node's precision
    node_precisions: dict[str, Any] | None = None
    # what the backend decided of a quantized engine, into the job's quantization report:
    # TensorRT's timing against the fp16 engine, and `shipped`/`why` when fp16 ships instead
    quantization: dict[str, Any] | None = None


@dataclass(frozen=True)
class Validation:
    """Stage `validate`: the verdict on the engine against the original model."""

    report: ValidationReport
    accuracy: AccuracyReport  # how it was judged (e.g. precision evaluation)
    subject: str  # what was judged, for the error message: "the engine of job ..."

    @property
    def passed(self) -> bool:
        return self.report.passed


@dataclass(frozen=True)
class BenchmarkContext:
    """What the job's benchmark records share beside their timings (pipeline/benchmark_context
    gathers it): the environment, and each timed model's traffic by variant (a BenchmarkVariant;
    the ablation's stages apart, for the records of its suite)."""

    environment: dict[str, Any]
    traffic: Mapping[str, ModelTraffic] = field(default_factory=dict)
    ablation_traffic: Mapping[str, ModelTraffic] = field(default_factory=dict)

    def columns(self, suite: str, variant: str, batch_size: int,
                latency_ms_p50: float) -> dict[str, Any]:
        """The record's environment, key and traffic columns (None where the model's traffic or
        the bandwidth is unknown, or the latency is not positive)."""
        columns: dict[str, Any] = {
            "environment": self.environment,
            "environment_key": environment_key(self.environment),
            "bytes_per_inference": None, "achieved_gb_s": None, "bandwidth_fraction": None,
        }
        by_variant = self.ablation_traffic if suite == BenchmarkSuite.ABLATION else self.traffic
        traffic = by_variant.get(variant)
        if traffic is None:
            return columns
        moved = traffic.bytes_per_inference(max(batch_size, 1))
        columns["bytes_per_inference"] = float(moved)
        if latency_ms_p50 > 0:
            achieved = moved / (latency_ms_p50 / 1000) / 1e9
            columns["achieved_gb_s"] = achieved
            bandwidth = self.environment.get("memory_bandwidth_gb_s")
            if bandwidth:
                columns["bandwidth_fraction"] = achieved / bandwidth
        return columns


@dataclass
class JobOutcome:
    """What the run records: with `succeeded`, or with a failure (whatever exists by then)."""

    artifacts: dict[str, PendingArtifact] = field(default_factory=dict)  # by name: reruns replace
    # the fusion, accuracy (verdicts, bisection, fallback...) and engine reports
    reports: JobReports = field(default_factory=JobReports)
    validation: ValidationReport | None = None
    benchmarks: list[BenchmarkResult] = field(default_factory=list)
    ablation: list[BenchmarkResult] = field(default_factory=list)
    sweep: list[BenchmarkResult] = field(default_factory=list)  # original and engine per batch
    # where the benchmarks ran and what they moved, for every record (pipeline/benchmark_context)
    benchmark_context: BenchmarkContext | None = None
    original_shipped: str | None = None  # why the original ships instead of an engine (one sentence)
    original_backend: str | None = None  # the backend the original ships on

    def add_artifacts(self, artifacts: tuple[PendingArtifact, ...]) -> None:
        self.artifacts.update((artifact.name, artifact) for artifact in artifacts)
