"""What one job's stages share while it runs: its config, scratch folder and results so far."""

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.backends.onnxruntime.build import OrtEngine
from optimizer.backends.tensorrt import TrtEngine
from optimizer.benchmark import BenchmarkResult
from optimizer.fusion_report import FusionReport
from optimizer.tensor_specs import TensorSpec
from optimizer.validation import ValidationReport

__all__ = ["JobContext", "PendingArtifact"]


@dataclass(frozen=True)
class PendingArtifact:
    """A file in the scratch folder that becomes an artifact if the job succeeds."""

    name: str
    kind: str
    path: Path


@dataclass
class JobContext:
    job_id: uuid.UUID
    config: dict[str, Any]
    model_path: Path  # the uploaded model, read-only
    scratch_dir: Path
    dataset_path: Path | None = None  # the job's validation dataset (.npz), if it names one
    input_specs: tuple[TensorSpec, ...] = ()  # model inputs with the job's static shapes
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    static_model_path: Path | None = None
    # tensorrt jobs with optimization profiles: the model with the profiled dims left dynamic,
    # which the engine is fused and built from (static_model_path stays the reference's shapes)
    profiled_model_path: Path | None = None
    fused_model_path: Path | None = None
    engine_source_path: Path | None = None  # what the engine is built from (fused, maybe fp16)
    fusion_report: FusionReport | None = None
    engine: OrtEngine | TrtEngine | None = None
    engine_report: dict[str, Any] | None = None  # tensorrt: metadata + TensorRT's layer summary
    validation: ValidationReport | None = None
    benchmarks: list[BenchmarkResult] = field(default_factory=list)
    ablation: list[BenchmarkResult] = field(default_factory=list)
    artifacts: dict[str, PendingArtifact] = field(default_factory=dict)  # by name: reruns replace
    # Set by the validation fallback: rules kept off, or ORT's level overridden.
    excluded_rules: tuple[str, ...] = ()
    passes_override: str | None = None
    ort_level_override: str | None = None
    accuracy: dict[str, Any] = field(default_factory=dict)  # verdict, bisection, fallback...
    labels: Any = None  # the dataset's class labels (numpy array), when it has them

    def add_artifact(self, name: str, kind: str, path: Path) -> None:
        self.artifacts[name] = PendingArtifact(name, kind, path)
