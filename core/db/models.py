"""ORM models: projects and their API keys, uploaded models and datasets, jobs and everything a
job produces, and workers."""

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from core.db.types import UtcDateTime, utc_now

__all__ = [
    "DEFAULT_PROJECT_ID",
    "ApiKey",
    "Artifact",
    "Base",
    "BenchmarkRecord",
    "BenchmarkSuite",
    "BenchmarkVariant",
    "Calibration",
    "Dataset",
    "DatasetRole",
    "IdempotencyKey",
    "Job",
    "JobEvent",
    "JobStatus",
    "Model",
    "Project",
    "SearchCandidate",
    "ValidationResult",
    "WebhookDelivery",
    "Worker",
]

# Stable constraint names, so autogenerate and downgrades see the same names on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class BenchmarkSuite(StrEnum):
    """Which measurement a benchmark record belongs to (`BenchmarkRecord.suite`)."""

    COMPARISON = "comparison"  # original (onnxruntime: also original_unoptimized) vs engine
    ABLATION = "ablation"  # the cumulative fusion stages, in order (optimizer.measure.ablation)
    SWEEP = "sweep"  # original and engine at each of the job's benchmark.batch_sizes


class BenchmarkVariant(StrEnum):
    """What a comparison or sweep record timed (`BenchmarkRecord.variant`). Ablation records
    are named by their fusion stage instead (optimizer.measure.ablation.ABLATION_STAGES)."""

    ORIGINAL = "original"  # the upload at the backend's default: what its user runs today
    # onnxruntime only: the upload with every ONNX Runtime optimization off
    ORIGINAL_UNOPTIMIZED = "original_unoptimized"
    ENGINE = "engine"  # what the job built


class DatasetRole(StrEnum):
    """What a dataset is for (`Dataset.role`); one set of samples has one role, so the samples
    that calibrate an INT8 model are never the ones that judge its accuracy."""

    CALIBRATION = "calibration"  # computes a quantized model's activation ranges
    VALIDATION = "validation"  # the samples the engine's outputs are compared on


# The project rows from before projects belong to (the migration creates it), and the one
# requests act as when auth is off (FUSEFORGE_AUTH__ENABLED=false, dev and test only).
DEFAULT_PROJECT_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")


class Project(Base):
    """What API keys, models, datasets and jobs belong to; a key sees its project's rows only."""

    __tablename__ = "projects"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    # The callback URL of the project's jobs submitted without a `callback_url` of their own
    # (copied into the job's config at submit time); None: such jobs send no webhook.
    default_callback_url: Mapped[str | None] = mapped_column(Text)


class ApiKey(Base):
    """An API key of a project, kept as an HMAC of the key (core/api_keys.py), never the key.

    `prefix` (the key's first characters) finds the candidates for a presented key and names
    the key in listings; it says too little to use. A key works while it is neither revoked
    nor past `expires_at`.
    """

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    key_hash: Mapped[str] = mapped_column(String(64))  # hex HMAC-SHA256
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    project: Mapped[Project] = relationship()


class IdempotencyKey(Base):
    """An `Idempotency-Key` a project sent on a route (api/services/idempotency.py).

    Inserting the row claims the key: the unique constraint lets one request of several
    concurrent ones run. While `status_code` is null the first request is still running; then
    its answer (`status_code`, `response_body`, the JSON as sent) is replayed to a repeat whose
    body has the same `fingerprint`. Past `expires_at` (the lease of a running request, the
    replay window of an answered one) the row no longer holds the key; the janitor purges it.
    """

    __tablename__ = "idempotency_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    route: Mapped[str] = mapped_column(String(64))  # "POST /v1/jobs"
    key: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))  # hex SHA-256 of the request body
    status_code: Mapped[int | None] = mapped_column(Integer)  # None: still running
    response_body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (
        UniqueConstraint("project_id", "route", "key",
                         name="uq_idempotency_keys_project_id_route_key"),
        Index("ix_idempotency_keys_expires_at", "expires_at"),
    )


class ResumableUpload(Base):
    """A model upload sent in pieces (the tus 1.0 protocol: api/services/uploads/resumable.py).

    Each piece is an object of the artifact store (`uploads/<id>/<piece number>`), committed
    before `offset` moves past it, so a piece cut off by a dying API is sent again from the
    last offset; the set becomes a model when it is whole (POST /v1/models?upload_id=). Past
    `expires_at` the janitor removes the row and what is left of its pieces.
    """

    __tablename__ = "resumable_uploads"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                                  index=True)
    filename: Mapped[str | None] = mapped_column(String(255))  # Upload-Metadata's filename
    length: Mapped[int] = mapped_column(BigInteger)  # Upload-Length: the whole file
    offset: Mapped[int] = mapped_column(BigInteger, default=0)  # bytes stored so far
    pieces: Mapped[int] = mapped_column(Integer, default=0)  # pieces stored so far
    # Once it was made a model: that model's sha256 (its pieces are then gone; the row stays
    # until it expires, so a repeat of that request finds the model again).
    model_sha256: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_resumable_uploads_expires_at", "expires_at"),)


class Model(Base):
    """An uploaded ONNX model, stored once per project and content hash."""

    __tablename__ = "models"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    storage_uri: Mapped[str] = mapped_column(Text)
    ir_version: Mapped[int] = mapped_column(Integer)
    opset: Mapped[int] = mapped_column(Integer)
    producer: Mapped[str] = mapped_column(String(255))
    inputs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    outputs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # what the upload check found valid but suspect (NaN weights); null: nothing (or an older row)
    warnings: Mapped[list[str] | None] = mapped_column(JSON)
    # An upload of the model with its data files: the stored object is then a tar, and this
    # says what it holds: {"model_file": its .onnx member, "files": [{"location", "size",
    # "sha256", "tensors"}], "tensor_bytes", "file_bytes"} (sha256 is then the set's,
    # optimizer/model/archive.py). Null: the object is the .onnx file itself.
    external_data: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (
        Index("ix_models_created_at", "created_at"),
        UniqueConstraint("project_id", "sha256", name="uq_models_project_id_sha256"),
    )


class Dataset(Base):
    """An uploaded .npz of model inputs (optional `labels`), stored once per project and content
    hash.

    `arrays` describes one sample of each input array: [{"name", "dtype", "shape", "min",
    "max"}], the shape without the leading sample axis, and the least and greatest value over
    all samples (absent in rows uploaded before ranges were recorded); `samples` is the length
    of that axis (the same for all). `role`: a `DatasetRole` (rows from before roles validate).
    """

    __tablename__ = "datasets"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    storage_uri: Mapped[str] = mapped_column(Text)
    samples: Mapped[int] = mapped_column(Integer)
    arrays: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    has_labels: Mapped[bool] = mapped_column(Boolean)
    role: Mapped[str] = mapped_column(String(16), default=DatasetRole.VALIDATION,
                                      server_default=DatasetRole.VALIDATION.value)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (
        Index("ix_datasets_created_at", "created_at"),
        UniqueConstraint("project_id", "sha256", name="uq_datasets_project_id_sha256"),
    )


class Calibration(Base):
    """The activation ranges a calibration computed, stored once per (model, dataset, method,
    graph, samples) and reused by every job and GPU that quantizes the same graph the same way.

    `method`: minmax, entropy or percentile; `graph_sha256`: the hash of the fp32 graph the
    ranges were computed on; `storage_uri`, `sha256`, `size_bytes`: the stored ranges file;
    `samples`: how many calibration samples were used, the dataset's first ones in file order
    (a job without a validation dataset holds its last fifth apart). The rows go with their model or dataset
    (cascade); core/db/calibrations.py finds and records them.
    """

    __tablename__ = "calibrations"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    project_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True)
    model_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    dataset_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    method: Mapped[str] = mapped_column(String(16))
    graph_sha256: Mapped[str] = mapped_column(String(64))
    storage_uri: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (
        # Also the index a model's calibrations are found by (model_id leads).
        UniqueConstraint("model_id", "dataset_id", "method", "graph_sha256", "samples",
                         name="uq_calibrations_model_id_dataset_id_method_graph_sha256_samples"),
    )


class Job(Base):
    """One optimization run of a model; its status moves only through core/db/job_state.py."""

    __tablename__ = "jobs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    # The model's project (a job sees only its own project's model and dataset).
    project_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True)
    model_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("models.id", ondelete="RESTRICT"))
    # The validation inputs, when the job names a dataset (also in config["dataset_id"]).
    dataset_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("datasets.id", ondelete="RESTRICT")
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    stage: Mapped[str | None] = mapped_column(String(32))
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    # Why a queued job is waiting, e.g. no worker with the GPU it needs is online.
    status_detail: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    fusion_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # optimizer.FusionReport
    # How validation went beyond the per-output rows: bisection, blame, fallback, localisation.
    accuracy_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # tensorrt jobs: the engine's metadata and the inspector's summary of TensorRT's layers.
    engine_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Per-node times of the original and the engine, mapped to the original's nodes; hot spots.
    profile_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # A search job's decision: the Pareto table, the winner and why, why each other lost.
    search_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The job process's peak resident memory in each stage (core.reports.StageMemory).
    stage_memory: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # What the finished job asked for and shipped, and its headline (core.outcome.Outcome);
    # null while it is queued or running.
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    model: Mapped[Model] = relationship()
    dataset: Mapped[Dataset | None] = relationship()
    artifacts: Mapped[list["Artifact"]] = relationship(
        order_by="Artifact.name", cascade="all, delete-orphan", passive_deletes=True
    )
    validation_results: Mapped[list["ValidationResult"]] = relationship(
        order_by="ValidationResult.output_name", cascade="all, delete-orphan", passive_deletes=True
    )
    benchmarks: Mapped[list["BenchmarkRecord"]] = relationship(
        order_by="BenchmarkRecord.id", cascade="all, delete-orphan", passive_deletes=True
    )
    events: Mapped[list["JobEvent"]] = relationship(
        order_by="JobEvent.id", cascade="all, delete-orphan", passive_deletes=True
    )

    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name="status"
        ),
        CheckConstraint("progress >= 0 AND progress <= 1", name="progress"),
        Index("ix_jobs_created_at", "created_at"),
        Index("ix_jobs_status", "status"),
    )


class Artifact(Base):
    """A file a job produced, kept in the artifact store; its row commits with `succeeded`.

    `expired_at`: when retention removed the file (worker/retention.py); the row stays so the
    job still lists it, and a download answers 410.
    """

    __tablename__ = "artifacts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    uri: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)
    expired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_artifacts_job_id_name"),)


class ValidationResult(Base):
    """How one output of the engine compared with the original model's."""

    __tablename__ = "validation_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    output_name: Mapped[str] = mapped_column(String(255))
    samples: Mapped[int] = mapped_column(Integer)
    max_abs_err: Mapped[float | None] = mapped_column(Float)  # None: not finite
    max_rel_err: Mapped[float | None] = mapped_column(Float)  # None: not finite
    mean_abs_err: Mapped[float | None] = mapped_column(Float)  # None: not finite
    cosine_similarity: Mapped[float | None] = mapped_column(Float)  # None: not finite
    atol: Mapped[float] = mapped_column(Float)
    rtol: Mapped[float] = mapped_column(Float)
    min_cosine: Mapped[float] = mapped_column(Float)
    passed: Mapped[bool] = mapped_column(Boolean)
    # every metric of optimizer.validation.OutputComparison (RMSE, SNR, percentiles, top-k...)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class BenchmarkRecord(Base):
    """Latency, throughput and memory of one variant (original or engine), timed side by side."""

    __tablename__ = "benchmark_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    suite: Mapped[str] = mapped_column(String(16), default=BenchmarkSuite.COMPARISON,
                                       server_default=BenchmarkSuite.COMPARISON.value)
    variant: Mapped[str] = mapped_column(String(64))  # a BenchmarkVariant, or an ablation stage
    backend: Mapped[str] = mapped_column(String(32))
    batch_size: Mapped[int] = mapped_column(Integer)
    iterations: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer)
    latency_ms_p50: Mapped[float] = mapped_column(Float)
    latency_ms_p90: Mapped[float] = mapped_column(Float)
    latency_ms_p99: Mapped[float] = mapped_column(Float)
    latency_ms_mean: Mapped[float] = mapped_column(Float)
    throughput_per_s: Mapped[float] = mapped_column(Float)
    peak_memory_mb: Mapped[float | None] = mapped_column(Float)
    speedup_vs_reference: Mapped[float | None] = mapped_column(Float)
    # the clock behind the latencies: "host_clock" (around a run, copies included) or a
    # device's own (e.g. "cuda_events", the engine alone); null on records from before it
    timing: Mapped[str | None] = mapped_column(String(32))
    device_memory_mb: Mapped[float | None] = mapped_column(Float)  # accelerator memory held
    # The speed-up's bootstrap confidence interval (from the per-round ratios) and what it says:
    # "faster", "slower" or "no measurable difference" (the interval reaches within 1% of 1.0); null for the
    # reference variant and records from before these columns.
    speedup_ci_low: Mapped[float | None] = mapped_column(Float)
    speedup_ci_high: Mapped[float | None] = mapped_column(Float)
    speedup_verdict: Mapped[str | None] = mapped_column(String(32))
    # The median latency's bootstrap interval: what regressions are judged on.
    latency_ms_p50_ci_low: Mapped[float | None] = mapped_column(Float)
    latency_ms_p50_ci_high: Mapped[float | None] = mapped_column(Float)
    latencies_ms: Mapped[list[float] | None] = mapped_column(JSON)  # each timed round, in order
    # The warm-up ran until the timings' coefficient of variation fell under the threshold
    # (warmup_stable) or hit its cap; warmup_cv is the last window's.
    warmup_cv: Mapped[float | None] = mapped_column(Float)
    warmup_stable: Mapped[bool | None] = mapped_column(Boolean)
    # Where it was measured (CPU, threads, memory, OS, library versions, GPU, worker) and the
    # digest of the fields two records must share to be compared.
    environment: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    environment_key: Mapped[str | None] = mapped_column(String(64))
    # Digest of the job settings that make two records the same measurement (backend,
    # precision, passes, shapes, batch, suite, variant): the history groups by it.
    config_key: Mapped[str | None] = mapped_column(String(64), index=True)
    # Physical context: bytes an inference moves at least (weights, inputs, outputs), the rate
    # achieved at this latency, and its fraction of the worker's measured memory bandwidth.
    bytes_per_inference: Mapped[float | None] = mapped_column(Float)
    achieved_gb_s: Mapped[float | None] = mapped_column(Float)
    bandwidth_fraction: Mapped[float | None] = mapped_column(Float)
    # On an engine record slower than the best earlier engine of the same configuration and
    # environment beyond both intervals: the figures (the earlier job, both medians and intervals).
    regression: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)


class SearchCandidate(Base):
    """One candidate of a search job, recorded as soon as it is judged, so a search whose
    process died resumes at the next candidate (worker/pipeline/steps/search.py).

    `outcome`: "building" while it is built (a row left so means its build killed the process),
    then timed, out_of_accuracy_budget, failed or not_tried (optimizer/search/decision.py's
    Outcome); `accuracy`: the worst output's metrics; `recipe`: the job fields that rebuild it.
    """

    __tablename__ = "search_candidates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    outcome: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    recipe: Mapped[dict[str, Any]] = mapped_column(JSON)
    accuracy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    engine_bytes: Mapped[int | None] = mapped_column(BigInteger)
    build_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    # Also the index a job's candidates are read by (job_id leads).
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_search_candidates_job_id_name"),)


class JobEvent(Base):
    """One step of a job's timeline: a stage started, a state change, a note from the worker."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    stage: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    # A job's events after an id, in order (GET /v1/jobs/{id}/events): one range scan, no sort.
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)


class WebhookDelivery(Base):
    """One attempt to POST a job's webhook to its callback URL (core/webhooks/delivery.py).

    `final` marks the attempt after which none follows (delivered, refused, or out of
    attempts): until one is, the job's document can still change.
    """

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    delivery_id: Mapped[uuid.UUID] = mapped_column(Uuid)  # one per event, kept across retries
    event: Mapped[str] = mapped_column(String(32))  # "job.succeeded", "job.failed"...
    attempt: Mapped[int] = mapped_column(Integer)  # 1, 2, ...
    url: Mapped[str] = mapped_column(Text)
    status_code: Mapped[int | None] = mapped_column(Integer)  # None: no HTTP answer
    error: Mapped[str | None] = mapped_column(Text)  # None: delivered (2xx)
    duration_ms: Mapped[float] = mapped_column(Float)
    final: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utc_now)

    __table_args__ = (
        UniqueConstraint("job_id", "attempt", name="uq_webhook_deliveries_job_id_attempt"),
    )


class Worker(Base):
    """A Celery worker node and what it can build on (GPU, TensorRT), refreshed by its heartbeat.

    A worker is online while `expires_at` lies ahead and `stopped_at` is unset; `queues` are the
    queues it consumes, so "can any online worker take this job" is "does one consume its queue".
    """

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)  # Celery node: celery@host
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[list[str]] = mapped_column(JSON)
    gpu_name: Mapped[str | None] = mapped_column(String(255))  # the GPU builds run on (device 0)
    compute_capability: Mapped[str | None] = mapped_column(String(16))  # "9.0"
    gpu_memory_mib: Mapped[int | None] = mapped_column(Integer)
    tensorrt_version: Mapped[str | None] = mapped_column(String(32))
    # optimizer.capabilities.HostCapabilities.to_dict(): every visible GPU and detection notes
    capabilities: Mapped[dict[str, Any]] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)  # offline past this without a beat
    stopped_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # set on a clean shutdown

    __table_args__ = (Index("ix_workers_expires_at", "expires_at"),)
