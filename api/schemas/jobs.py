"""Bodies of /v1/jobs: the job configuration users send and the job they read back."""

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import Page

__all__ = [
    "ArtifactRead",
    "BenchmarkConfig",
    "BenchmarkRead",
    "JobConfig",
    "JobCreate",
    "JobError",
    "JobEventRead",
    "JobList",
    "JobRead",
    "JobSummary",
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


class BenchmarkConfig(BaseModel):
    model_config = _STRICT

    warmup: int = Field(default=5, ge=0, le=1000)
    iterations: int = Field(default=30, ge=1, le=10000)
    measure_memory: bool = True


class JobConfig(BaseModel):
    """How to optimize: stored on the job exactly as it ran (input shapes resolved)."""

    model_config = _STRICT

    backend: Literal["onnxruntime"] = "onnxruntime"
    precision: Literal["fp32"] = "fp32"
    input_shapes: dict[str, list[int]] | None = Field(
        default=None, description="static shape per input; dynamic dims not given default to 1"
    )
    ort_optimization_level: Literal["disabled", "basic", "extended", "all"] = "all"
    validation: ValidationConfig = ValidationConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()


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


class ValidationRead(BaseModel):
    passed: bool
    outputs: list[OutputValidationRead]


class BenchmarkRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

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
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobRead(JobSummary):
    config: JobConfig
    worker: str | None
    attempts: int
    artifacts: list[ArtifactRead]
    validation: ValidationRead | None
    benchmarks: list[BenchmarkRead]
    events: list[JobEventRead]


JobList = Page[JobSummary]
