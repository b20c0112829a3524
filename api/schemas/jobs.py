"""Bodies of /v1/jobs: the job users create (a `core.job_config.JobConfig` and a model) and
the job they read back."""

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from api.schemas import examples
from api.schemas.common import Page
from core.db.models import JobStatus
from core.job_config import Backend, JobConfig, Precision

__all__ = [
    "ArtifactRead",
    "BenchmarkRead",
    "FusionReportRead",
    "JobCreate",
    "JobError",
    "JobEventRead",
    "JobList",
    "JobRead",
    "JobSummary",
    "OutputValidationRead",
    "ValidationRead",
    "WebhookDeliveryRead",
]

class JobCreate(JobConfig):
    model_config = ConfigDict(json_schema_extra={"examples": [*examples.JOB_CREATE]})

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
    # when retention removed the file (FUSEFORGE_RETENTION__ARTIFACTS_DAYS): the url answers 410
    expired_at: datetime | None = None


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

    # "comparison" (original, original_unoptimized on onnxruntime, engine), "ablation"
    # (cumulative fusion stages) or "sweep" (original and engine at each benchmark.batch_sizes)
    suite: str
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
    # the speed-up's bootstrap confidence interval over the per-round ratios, and its verdict:
    # "faster", "slower", or "no measurable difference" when the interval holds 1.0
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_verdict: str | None = None
    latency_ms_p50_ci_low: float | None = None  # the median latency's bootstrap interval
    latency_ms_p50_ci_high: float | None = None
    latencies_ms: list[float] | None = None  # every timed round
    warmup_cv: float | None = None  # coefficient of variation of the warm-up's last window
    warmup_stable: bool | None = None  # false: the warm-up hit its cap before settling
    environment: dict[str, Any] | None = None  # where it was measured
    environment_key: str | None = None
    config_key: str | None = None
    bytes_per_inference: float | None = None  # weights + inputs + outputs: the least it moves
    achieved_gb_s: float | None = None
    bandwidth_fraction: float | None = None  # of the worker's measured memory bandwidth
    regression: dict[str, Any] | None = None  # slower than the best earlier engine: the figures


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


class WebhookDeliveryRead(BaseModel):
    """One attempt to POST the job's webhook to its callback_url."""

    attempt: int
    event: str  # "job.succeeded", "job.failed", "job.cancelled"
    status_code: int | None  # null: no HTTP answer (refused, timed out, not allowed)
    error: str | None  # null: delivered
    duration_ms: float
    at: datetime


class JobSummary(BaseModel):
    """A job as a jobs table shows it: the list's items, the project stream's `job` events."""

    id: uuid.UUID
    model_id: uuid.UUID
    model_name: str  # the uploaded model's name
    backend: Backend  # config.backend
    precision: Precision  # config.precision
    status: JobStatus
    stage: str | None
    progress: float
    error: JobError | None
    # while queued: why it is waiting, e.g. no online worker has the GPU it needs
    status_detail: str | None = None
    # the engine's speed-up over the original: the comparison benchmark's engine record's
    # speedup_vs_reference (median over interleaved rounds); null until benchmarked
    speedup: float | None = None
    # its bootstrap confidence interval and verdict: "faster", "slower", or "no measurable
    # difference" (the interval holds 1.0: not a win, whatever the median says)
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_verdict: str | None = None
    # that engine record's regression: slower than the best earlier engine of the model with the
    # same configuration and environment beyond both latency intervals (against_job,
    # both medians and intervals, slowdown, detail); null when not flagged
    regression: dict[str, Any] | None = None
    # every output within tolerance (validation.passed); null until validated
    validation_passed: bool | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None = None  # finished_at - started_at; null until both are set


class JobRead(JobSummary):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.JOB]})

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
    # every attempt to deliver the job's webhook (config.callback_url), oldest first
    webhook_deliveries: list[WebhookDeliveryRead] = []


class JobList(Page[JobSummary]):
    model_config = ConfigDict(
        json_schema_extra={"examples": [examples.page(examples.JOB_SUMMARIES)]})
