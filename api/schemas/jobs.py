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
from core.outcome import Outcome
from core.reports import FusionReportRead, JobReports

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

    suite: str  # a BenchmarkSuite
    variant: str  # a BenchmarkVariant, or an ablation stage
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
    # "faster", "slower", or "no measurable difference" when the interval reaches within 1% of 1.0
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
    backend: Backend  # config.backend; a search job's, its winner's once it has one
    precision: Precision  # config.precision; a search job's, its winner's once it has one
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
    # difference" (the interval reaches within 1% of 1.0: not a win, whatever the median says)
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_verdict: str | None = None
    # that engine record's regression: a lower speed-up over the original (timed in the same
    # run) than the best earlier engine of the model with the same shipped configuration and
    # environment, beyond both intervals (against_job, both speed-ups and intervals, both
    # medians, slowdown, detail); null when not flagged
    regression: dict[str, Any] | None = None
    # every output within tolerance (validation.passed); null until validated
    validation_passed: bool | None = None
    # what the finished job asked for and shipped, its speed-up and accuracy verdicts, why they
    # differ, and `headline`: the one sentence every surface prints; null while queued/running
    outcome: Outcome | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None = None  # finished_at - started_at; null until both are set


class JobRead(JobReports, JobSummary):
    """A job with everything it recorded; its report fields are `core.reports.JobReports`'s."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.JOB]})

    config: JobConfig
    worker: str | None
    attempts: int
    artifacts: list[ArtifactRead]
    validation: ValidationRead | None
    benchmarks: list[BenchmarkRead]
    events: list[JobEventRead]
    # seconds spent in each stage, from its "stage <name> started" events (a stage entered
    # again by a fallback counts once, both rounds summed); a running stage until read
    stage_seconds: dict[str, float] = {}
    # every attempt to deliver the job's webhook (config.callback_url), oldest first
    webhook_deliveries: list[WebhookDeliveryRead] = []


class JobList(Page[JobSummary]):
    model_config = ConfigDict(
        json_schema_extra={"examples": [examples.page(examples.JOB_SUMMARIES)]})
