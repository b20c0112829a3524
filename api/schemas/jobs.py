"""Bodies of /v1/jobs: the job configuration users send and the job they read back."""

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from optimizer.capabilities import normalize_compute_capability
from optimizer.passes import PASSES_BY_NAME

from api.schemas.common import Page

__all__ = [
    "AccuracyBudget",
    "ArtifactRead",
    "BenchmarkConfig",
    "FusionReportRead",
    "BenchmarkRead",
    "JobConfig",
    "JobCreate",
    "JobError",
    "JobEventRead",
    "JobList",
    "JobRead",
    "JobSummary",
    "OptimizationProfileRequest",
    "OutputValidationRead",
    "ValidationConfig",
    "ValidationRead",
]

_STRICT = ConfigDict(extra="forbid")  # a misspelt option is a 422, never silently ignored


class ValidationConfig(BaseModel):
    model_config = _STRICT

    samples: int = Field(default=8, ge=1, le=256, description="seeded random input sets")
    seed: int = Field(default=0, ge=0)
    atol: float | None = Field(default=None, gt=0, description="overrides the precision default")
    rtol: float | None = Field(default=None, ge=0)
    min_cosine: float | None = Field(default=None, gt=0, le=1)
    # Optional limits, unchecked unless given (optimizer.validation.Tolerances).
    max_rel_err: float | None = Field(default=None, gt=0)
    max_rmse: float | None = Field(default=None, gt=0)
    min_snr_db: float | None = None
    min_top1_agreement: float | None = Field(default=None, ge=0, le=1)
    min_top5_agreement: float | None = Field(default=None, ge=0, le=1)
    max_accuracy_drop: float | None = Field(default=None, ge=0, le=1)


class BenchmarkConfig(BaseModel):
    model_config = _STRICT

    warmup: int = Field(default=5, ge=0, le=1000)
    iterations: int = Field(default=30, ge=1, le=10000)
    measure_memory: bool = True


class AccuracyBudget(BaseModel):
    """What `precision_search` must keep: limits on the worst output against the fp32 original."""

    model_config = _STRICT

    min_cosine: float | None = Field(default=0.999, gt=0, le=1)
    min_top1_agreement: float | None = Field(default=None, ge=0, le=1)
    max_abs_err: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _at_least_one_limit(self) -> "AccuracyBudget":
        if self.min_cosine is None and self.min_top1_agreement is None and self.max_abs_err is None:
            raise ValueError("set at least one of min_cosine, min_top1_agreement, max_abs_err")
        return self


# strict: JSON true or 2.0 is not a dim (pydantic would otherwise take them as 1 and 2)
_Dim = Annotated[int, Field(strict=True, ge=1)]


class OptimizationProfileRequest(BaseModel):
    """The shapes a TensorRT engine accepts for one input: min <= opt <= max on every axis."""

    model_config = _STRICT

    min: list[_Dim] = Field(description="smallest shape the engine accepts")
    opt: list[_Dim] = Field(description="the shape TensorRT tunes its kernels for")
    max: list[_Dim] = Field(description="largest shape the engine accepts")


class JobConfig(BaseModel):
    """How to optimize: stored on the job exactly as it ran (input shapes resolved)."""

    model_config = _STRICT

    backend: Literal["onnxruntime", "tensorrt"] = Field(
        default="onnxruntime",
        description='"onnxruntime" runs on CPU workers; "tensorrt" builds a TensorRT engine on a '
        "GPU worker",
    )
    target_gpu: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description='tensorrt only: build on this GPU, named by compute capability ("9.0") or by '
        'model as the driver reports it, with or without "NVIDIA" ("H200")',
    )
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        default="fp32",
        description="fp16/bf16 convert the graph (sensitive ops kept in fp32) and validate it "
        "against the fp32 original with that precision's tolerances",
    )
    input_shapes: dict[str, list[int]] | None = Field(
        default=None,
        description="static shape per input; dynamic dims not given come from the dataset's "
        "sample shape (with dataset_id), else the profile's opt (with profiles), else 1",
    )
    profiles: dict[str, OptimizationProfileRequest] | None = Field(
        default=None,
        description="tensorrt only: the range of shapes the engine accepts per input, e.g. "
        '{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, '
        "224]}}; only the model's dynamic dims may vary. Inputs left out are built for their "
        "input_shapes entry; a profiled input without one is validated and benchmarked at its "
        "opt shape (or the dataset's sample shape, which must lie within the profile)",
        examples=[{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224],
                             "max": [32, 3, 224, 224]}}],
    )
    input_ranges: dict[str, tuple[float, float]] | None = Field(
        default=None,
        description="[low, high) per input for the seeded random inputs, e.g. token ids in "
        "[0, vocab_size): integer inputs (whole-number bounds) draw low..high-1, float inputs "
        "uniform values",
    )
    dataset_id: uuid.UUID | None = Field(
        default=None,
        description="validate on an uploaded dataset (POST /v1/datasets) instead of random "
        "inputs; sample i of each array is one model call at that input's shape",
    )
    passes: Literal["all", "none"] | list[str] = Field(
        default="all", description='"all", "none", or pass names (GET /v1/passes lists them)'
    )
    ablation: bool = Field(
        default=False, description="also benchmark the fusion stages cumulatively"
    )
    precision_search: bool = Field(
        default=False,
        description="keep the fewest extra nodes in fp32 that bring an fp16/bf16 model within "
        "accuracy_budget",
    )
    accuracy_budget: AccuracyBudget = AccuracyBudget()
    on_validation_failure: Literal["fail", "fallback"] = Field(
        default="fail",
        description='"fallback" keeps the largest set of rewrites that validates instead of failing',
    )
    ort_optimization_level: Literal["disabled", "basic", "extended", "all"] = "all"
    validation: ValidationConfig = ValidationConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()

    @field_validator("target_gpu")
    @classmethod
    def _gpu_target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not any(ch.isalnum() for ch in value):
            raise ValueError(f"{value!r} names no GPU; give a compute capability like '9.0' or a "
                             "GPU model like 'H200'")
        # "sm_90" and "9.0" are one target: store the canonical form the worker queues use.
        return normalize_compute_capability(value) or value

    @field_validator("profiles")
    @classmethod
    def _no_empty_profiles(
        cls, value: dict[str, OptimizationProfileRequest] | None
    ) -> dict[str, OptimizationProfileRequest] | None:
        return value or None  # {} asks for nothing: stored as no profiles

    @field_validator("passes")
    @classmethod
    def _known_passes(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str):
            return value
        unknown = [name for name in value if name not in PASSES_BY_NAME]
        if unknown:
            raise ValueError(
                f"unknown pass(es) {', '.join(map(repr, unknown))}; available: "
                f"{', '.join(PASSES_BY_NAME)}"
            )
        return list(dict.fromkeys(value))  # drop repeats, keep the order given


class JobCreate(JobConfig):
    model_id: uuid.UUID


class JobError(BaseModel):
    code: str
    message: str


class ArtifactRead(BaseModel):
    name: str
    kind: str
    size_bytes: int
    sha256: str
    url: str


class OutputValidationRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    samples: int
    # null where the value is not finite (a NaN/Inf output, a shape mismatch): passed is false
    max_abs_err: float | None
    max_rel_err: float | None
    mean_abs_err: float | None
    cosine_similarity: float | None
    atol: float
    rtol: float
    min_cosine: float
    passed: bool
    metrics: dict[str, Any] | None  # RMSE, SNR (dB), |err| percentiles, NaN/Inf counts, top-k...


class ValidationRead(BaseModel):
    passed: bool
    outputs: list[OutputValidationRead]


class BenchmarkRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    suite: str  # "comparison" (original vs engine) or "ablation" (cumulative fusion stages)
    variant: str
    backend: str
    batch_size: int
    iterations: int
    warmup: int
    latency_ms_p50: float
    latency_ms_p90: float
    latency_ms_p99: float
    latency_ms_mean: float
    throughput_per_s: float
    peak_memory_mb: float | None
    speedup_vs_reference: float | None
    # ablation only: this stage measured slower than the stage before it
    slower_than_previous: bool | None = None
    # "host_clock" (around each run, copies included) or a device clock ("cuda_events": the
    # engine alone); every variant of a job is timed on one clock
    timing: str | None = None
    device_memory_mb: float | None = None  # accelerator memory the engine held (GPU runners)


class RuleStatsRead(BaseModel):
    pass_name: str
    rule: str
    applied: int
    refusals: list[dict[str, str]]  # [{"node": ..., "reason": ...}] near-misses the check refused


class FusionReportRead(BaseModel):
    backend: str
    passes_run: list[str]
    passes_skipped: dict[str, str]
    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    rules: list[RuleStatsRead]
    iterations: int
    duration_s: float
    notes: list[str]


class JobEventRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    stage: str | None
    message: str
    created_at: datetime


class JobSummary(BaseModel):
    id: uuid.UUID
    model_id: uuid.UUID
    status: str
    stage: str | None
    progress: float
    error: JobError | None
    # while queued: why it is waiting, e.g. no online worker has the GPU it needs
    status_detail: str | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobRead(JobSummary):
    config: JobConfig
    worker: str | None
    attempts: int
    artifacts: list[ArtifactRead]
    fusion_report: FusionReportRead | None
    # bisection of the rewrite rules when validation failed, who is to blame, the fallback taken
    accuracy_report: dict[str, Any] | None
    # tensorrt jobs: {"metadata": the engine's (TensorRT version, GPU, precision, profiles,
    # plugins, build time, size...), "layers": the engine inspector's summary of TensorRT's
    # layers and which ONNX nodes each fused, "reference_engine": the unfused model's metadata}
    engine_report: dict[str, Any] | None = None
    validation: ValidationRead | None
    benchmarks: list[BenchmarkRead]
    events: list[JobEventRead]


JobList = Page[JobSummary]
