"""Typed, validated settings shared by the API, the worker and the CLI.

Defaults are the embedded ones `make run` uses on a fresh machine: a SQLite database, a local
artifact folder and a SQLite-backed broker, all under `data_dir`. In `prod` the validator refuses
those defaults, naming the variable to set.
"""

import ipaddress
import secrets
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.invalid_settings import InvalidSettings

if TYPE_CHECKING:
    from optimizer.model.limits import ModelLimits


__all__ = [
    "AuthSettings", "HttpSettings", "IdempotencySettings", "InvalidSettings", "JanitorSettings",
    "JobSettings",
    "MetricsSettings", "ModelCheckSettings", "ModelLimitSettings", "QuotaSettings",
    "RetentionSettings", "Settings",
    "StageLimit", "StageLimits", "WebhookSettings", "get_settings",
]


# Each stage's wall-clock limit unless FUSEFORGE_JOBS__STAGE_LIMITS__<STAGE>__WALL_S says.
# `search` holds itself to the job's search.time_budget_s; its wall limit is only a backstop.
DEFAULT_STAGE_WALL_S = {"load": 600, "search": 4 * 3600, "optimize": 1800, "build_engine": 3600,
                        "validate": 1800, "benchmark": 1800, "profile": 900, "ablation": 3600, "store": 900}


class StageLimit(BaseModel):
    """What one stage of a job may use before its process is killed and the job fails, naming
    the stage and the limit (worker/supervision/supervisor.py). Unset: the defaults."""

    model_config = ConfigDict(extra="forbid")

    wall_s: float | None = Field(default=None, gt=0)  # None: DEFAULT_STAGE_WALL_S
    cpu_s: float | None = Field(default=None, gt=0)  # None: wall_s on every CPU the host has
    max_rss_gib: float | None = Field(default=None, gt=0)  # None: jobs.max_rss_gib


class StageLimits(BaseModel):
    """Per stage, e.g. FUSEFORGE_JOBS__STAGE_LIMITS__VALIDATE__WALL_S=600. A stage that runs
    again (a fallback round) starts its budget again. A TensorRT build also stops at
    jobs.trt_build_timeout_s; time spent waiting for the GPU does not count."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    load: StageLimit = StageLimit()
    search: StageLimit = StageLimit()
    optimize: StageLimit = StageLimit()
    build_engine: StageLimit = StageLimit()
    # `validate` would shadow BaseModel.validate: the field is validate_, named "validate" outside.
    validate_: StageLimit = Field(default=StageLimit(), alias="validate")
    benchmark: StageLimit = StageLimit()
    profile: StageLimit = StageLimit()
    ablation: StageLimit = StageLimit()
    store: StageLimit = StageLimit()

    def of(self, stage: str) -> StageLimit:
        """The limits of `stage` (a name from worker/pipeline/stages.py), wall_s filled in."""
        limit = getattr(self, "validate_" if stage == "validate" else stage, None)
        if not isinstance(limit, StageLimit):
            raise KeyError(f"no limits for stage {stage!r}")
        return limit.model_copy(update={"wall_s": limit.wall_s or DEFAULT_STAGE_WALL_S[stage]})


class JobSettings(BaseModel):
    max_runtime_s: int = Field(default=4 * 3600, gt=0)  # also the broker's visibility timeout
    heartbeat_interval_s: int = Field(default=30, gt=0)
    # A running job's supervisor touches its heartbeat every second; one silent this long (its
    # worker died, or its host was lost) is sent again to another worker by the janitor, this
    # many times, then failed as WorkerLost (a job that keeps taking its workers down ends).
    stale_after_s: int = Field(default=5 * 60, gt=0)
    lost_worker_resends: int = Field(default=1, ge=0, le=5)
    # A TensorRT build runs in a child process under these limits (core/isolation.py).
    trt_build_timeout_s: int = Field(default=3600, gt=0)
    trt_build_max_rss_gib: float = Field(default=64.0, gt=0)
    trt_workspace_gib: float = Field(default=8.0, gt=0)  # scratch memory the builder's tactics may use
    # Each job runs in a process of its own, killed when a stage breaks its limits or the job is
    # cancelled; the worker takes its next job at once.
    stage_limits: StageLimits = StageLimits()
    max_rss_gib: float = Field(default=32.0, gt=0)  # a job's process, in any stage
    # A running job's database writes retry this long through an outage before the job fails.
    database_retry_s: float = Field(default=120.0, ge=0)
    # A model with a Loop may go on forever on some inputs: its first run in a job is stopped
    # after this long, later runs after 20x its slowest (optimizer/backends/onnxruntime/run_limits.py).
    first_run_limit_s: float = Field(default=30.0, gt=0)


class JanitorSettings(BaseModel):
    """The janitor (worker/janitor.py): a process of its own that keeps jobs and files honest."""

    interval_s: float = Field(default=10.0, gt=0)
    # A job queued this long whose message the broker no longer holds is sent again.
    requeue_after_s: float = Field(default=60.0, gt=0)
    # A job queued this long whose message a worker took without claiming the job (it died
    # before starting it) is sent again, at most once in this long, rather than after the
    # broker's visibility timeout (jobs.max_runtime_s + 10 minutes). Longer than
    # jobs.database_retry_s: a worker retries its claim that long through a database outage.
    unclaimed_after_s: float = Field(default=300.0, gt=0)
    # An upload's temporary file untouched this long belonged to a dead request; a stored
    # model or dataset file no row names, untouched this long, was left by a failed delete.
    upload_stale_s: float = Field(default=3600.0, gt=0)
    # The slower rounds (retention, stored uploads no row names) run this often.
    sweep_interval_s: float = Field(default=3600.0, gt=0)

    # A finished job's webhook with no attempt this long after the job ended, or after its next
    # attempt was due, whose message the broker no longer holds, is sent again...
    webhook_resend_after_s: float = Field(default=300.0, gt=0)
    # ...if the job ended within this long: a lost webhook older than that is left alone.
    webhook_resend_within_s: float = Field(default=86400.0, gt=0)


class RetentionSettings(BaseModel):
    """What the janitor removes once it is old (worker/retention.py); unset keeps it for ever.

    `artifacts_days`: the artifact files of a job that finished this long ago are removed; the
    job and its artifact rows stay, marked expired, and downloading one answers 410.
    `events_days`: the events of finished jobs older than this are deleted. A queued or running
    job is never touched.
    """

    artifacts_days: float | None = Field(default=None, gt=0)  # FUSEFORGE_RETENTION__ARTIFACTS_DAYS
    events_days: float | None = Field(default=None, gt=0)  # FUSEFORGE_RETENTION__EVENTS_DAYS


class QuotaSettings(BaseModel):
    """Storage a project may use: its uploaded models and datasets plus its jobs' unexpired
    artifacts (api/services/uploads/quota.py). An upload that would pass it is refused with 413
    while it streams. Unset: no limit."""

    project_bytes: int | None = Field(default=None, gt=0)  # FUSEFORGE_QUOTA__PROJECT_BYTES


class ResumableUploadSettings(BaseModel):
    """Model uploads sent in pieces over tus 1.0 (api/services/uploads/resumable.py)."""

    # An upload neither finished nor sent to for this long is removed by the janitor.
    expiry_s: float = Field(default=24 * 3600.0, gt=0)  # FUSEFORGE_RESUMABLE__EXPIRY_S
    # The most one PATCH may carry (a piece is one object of the store).
    max_piece_bytes: int = Field(default=256 * 2**20, gt=0)


class IdempotencySettings(BaseModel):
    """`Idempotency-Key` on POST /v1/models, /v1/datasets and /v1/jobs (api/services/idempotency.py).

    A key's first successful answer is replayed to a repeat of the request for `ttl_s`; then
    the janitor purges it. A key whose first request has not answered within `lease_s` is
    taken as abandoned (the API process handling it died) and a repeat runs it again, so keep
    it above the longest an upload's check may take (model_check.timeout_s plus its queue).
    """

    ttl_s: float = Field(default=24 * 3600.0, gt=0)  # FUSEFORGE_IDEMPOTENCY__TTL_S
    lease_s: float = Field(default=900.0, gt=0)  # FUSEFORGE_IDEMPOTENCY__LEASE_S


class ModelLimitSettings(BaseModel):
    """Structural limits an uploaded model must stay within; the defaults are ModelLimits'."""

    # The same defaults as optimizer.model.limits.ModelLimits (a test holds them equal), written
    # out so that reading the settings imports no onnx (the CLI starts in a blink).
    max_dim: int = Field(default=2**31 - 1, gt=0)  # one declared dim
    max_rank: int = Field(default=32, gt=0)  # dims in one shape
    max_subgraph_depth: int = Field(default=8, ge=0)  # If/Loop/Scan
    max_name_length: int = Field(default=4096, gt=0)  # characters

    def to_limits(self) -> "ModelLimits":
        """The plain value optimizer.model_check takes."""
        from optimizer.model.limits import ModelLimits

        return ModelLimits(**self.model_dump())


class ModelCheckSettings(BaseModel):
    """How the API checks an uploaded model: in a child process under these limits, a few at a
    time, so a huge or hostile upload costs the API no memory (api/services/uploads/model_checks.py)."""

    max_rss_gib: float = Field(default=8.0, gt=0)  # the check's process; past it: 422
    timeout_s: float = Field(default=300.0, gt=0)
    at_once: int = Field(default=2, ge=1)  # more wait their turn


class HttpSettings(BaseModel):
    """How the API serves requests.

    A request body may pause up to `body_idle_timeout_s`; besides, after that much grace it must
    keep an average of `body_min_rate_bytes_s` (0: no floor), so a body trickling a byte a second
    (a slowloris) is cut off with 408 although it is never idle for long.

    `read_cache_s`: a job's status and a page of the job list may be served up to this old to
    clients polling them (a job that has ended is cached for 5 minutes: only a delete or
    retention changes it then); the API's own writes (create, cancel, delete) are seen at once.
    0 reads every request fresh.
    `health_cache_s`: how long /healthz reuses its probes of the database, broker and disk.

    GET /v1/jobs/{id}/events (Server-Sent Events) reads the job's new events every
    `events_poll_s` (GET /v1/jobs/stream the project's jobs, alike), sends a comment after
    `events_heartbeat_s` of silence so proxies keep the connection open, and ends after
    `events_max_s` with an `event: timeout` (the client reconnects with Last-Event-ID), so no
    stream holds a connection for ever.
    """

    body_idle_timeout_s: float = Field(default=30.0, gt=0)
    body_min_rate_bytes_s: int = Field(default=500, ge=0)
    read_cache_s: float = Field(default=0.5, ge=0)
    health_cache_s: float = Field(default=2.0, ge=0)
    events_poll_s: float = Field(default=0.5, gt=0)
    events_heartbeat_s: float = Field(default=15.0, gt=0)
    events_max_s: float = Field(default=1800.0, gt=0)


# Secrets a deployment copied from an example; prod refuses them like a missing one.
_PLACEHOLDER_SECRETS = frozenset({"", "change-me", "changeme", "secret", "placeholder", "xxx"})
_MIN_SECRET_LENGTH = 32


class WebhookSettings(BaseModel):
    """Job webhooks (core/webhooks/): where they may go, how they are signed and retried.

    A callback URL whose host resolves to a loopback, private, link-local, multicast, reserved or
    unspecified address is refused (a server-side request forgery guard) unless its host is in
    `allowed_hosts` or the address lies in `allowed_networks`, e.g.
    FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS='["10.1.0.0/16"]' for receivers on the internal network.
    """

    # HMAC-SHA256 key of the FuseForge-Signature header. Unset: one generated once into
    # data_dir/webhook-secret (the embedded default); prod needs FUSEFORGE_WEBHOOKS__SECRET.
    secret: str | None = None
    allowed_hosts: list[str] = []  # host names (or literal addresses) exempt from the guard
    allowed_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    timeout_s: float = Field(default=10.0, gt=0)  # one attempt, connect to last byte
    max_attempts: int = Field(default=5, ge=1, le=20)
    # The pause before attempt n+1 is first_retry_s * 2**(n-1), at most max_retry_s.
    first_retry_s: float = Field(default=1.0, ge=0)
    max_retry_s: float = Field(default=60.0, ge=0)

    def retry_after_s(self, attempt: int) -> float:
        """The pause after failed attempt `attempt` (1-based)."""
        return float(min(self.first_retry_s * 2 ** (attempt - 1), self.max_retry_s))


class MetricsSettings(BaseModel):
    """GET /metrics (api/services/metrics.py): Prometheus text, unauthenticated, for an internal
    network; `enabled=false` leaves the route out (404).

    `cache_s`: a scrape within this long of the last reuses its numbers (a burst of scrapes costs
    one set of queries). `stage_window_jobs`: stage durations describe this many most recently
    finished jobs (a window, not a running total).
    """

    enabled: bool = True
    cache_s: float = Field(default=1.0, ge=0)
    stage_window_jobs: int = Field(default=1000, ge=1)


class AuthSettings(BaseModel):
    """API keys (core/api_keys.py). Every /v1 route wants `Authorization: Bearer <key>`.

    `enabled=false` lets every request act as the "default" project: for a dev machine only
    (`fuseforge run` says so on every start; prod refuses it). `secret` keys the HMAC the keys
    are stored as; unset outside prod, one is generated once into `data_dir/secret`. Changing
    it invalidates every key.
    """

    enabled: bool = True  # FUSEFORGE_AUTH__ENABLED
    secret: SecretStr | None = None  # FUSEFORGE_AUTH__SECRET: 32+ random characters
    # An API process trusts a key it checked this long without reading it again (polling
    # clients send one per request); so a revocation takes up to this long to apply. 0: never.
    key_cache_s: float = Field(default=1.0, ge=0)  # FUSEFORGE_AUTH__KEY_CACHE_S


class S3StoreSettings(BaseModel):
    """An S3-compatible object store for artifacts (core/object_store.py), e.g.
    FUSEFORGE_STORAGE__S3__ENDPOINT_URL=http://seaweedfs:8333. Credentials unset: boto3's own
    chain (environment, instance role)."""

    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = None  # unset: AWS S3 in `region`
    bucket: str = ""
    prefix: str = ""  # every key goes under it, e.g. "fuseforge/"
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    # "path" (http://host/bucket/key) suits self-hosted stores; "virtual" is AWS's default.
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=60.0, gt=0)
    # Downloads answer 307 to a presigned URL, so artifact bytes go from the store to the client
    # without passing through the API. Off: the API streams them from the store itself.
    presigned_downloads: bool = True
    presigned_url_ttl_s: int = Field(default=300, ge=10, le=7 * 24 * 3600)  # S3's longest: 7 days
    # The address clients reach the store at, where it differs from the one the services use
    # (compose: http://objectstore:8333 inside, http://localhost:8333 outside); it is signed
    # into the presigned URL. Unset: endpoint_url.
    public_endpoint_url: str | None = None
    # Local copies of objects (models a worker runs) are kept up to this much, least recently
    # used first out; a copy used within the last hour stays even past it (a job may hold it).
    cache_max_bytes: int = Field(default=20 * 1024**3, ge=0)


class StorageSettings(BaseModel):
    """Where artifacts live: "local" (data_dir/artifacts, one host or a shared volume) or "s3"."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "s3"] = "local"  # FUSEFORGE_STORAGE__BACKEND
    s3: S3StoreSettings = S3StoreSettings()

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> "StorageSettings":
        if self.backend == "s3" and not self.s3.bucket:
            raise ValueError("FUSEFORGE_STORAGE__BACKEND=s3 needs FUSEFORGE_STORAGE__S3__BUCKET "
                             "(and, for a store other than AWS, FUSEFORGE_STORAGE__S3__ENDPOINT_URL)")
        if (self.s3.access_key_id is None) != (self.s3.secret_access_key is None):
            raise ValueError("FUSEFORGE_STORAGE__S3__ACCESS_KEY_ID and "
                             "FUSEFORGE_STORAGE__S3__SECRET_ACCESS_KEY go together: set both, or "
                             "neither (boto3's own chain: environment, instance role)")
        if self.s3.prefix.startswith("/") or ".." in self.s3.prefix.split("/"):
            raise ValueError(f"FUSEFORGE_STORAGE__S3__PREFIX {self.s3.prefix!r} must be a "
                             "relative key prefix without '..', e.g. 'fuseforge/'")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FUSEFORGE_", env_nested_delimiter="__")

    env: Literal["dev", "test", "prod"] = "dev"
    data_dir: Path = Path(".fuseforge")  # embedded default: SQLite file, artifacts, broker data
    database_url: str | None = None  # FUSEFORGE_DATABASE_URL, e.g. postgresql+psycopg://...
    broker_url: str | None = None  # FUSEFORGE_BROKER_URL, e.g. redis://127.0.0.1:6379/0
    host: str = "127.0.0.1"  # FUSEFORGE_HOST
    port: int = Field(default=8000, ge=1, le=65535)  # FUSEFORGE_PORT
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0)  # FUSEFORGE_MAX_UPLOAD_BYTES
    # /healthz is 503 while the data dir's filesystem has less free space than this.
    min_free_disk_bytes: int = Field(default=1024**3, ge=0)  # FUSEFORGE_MIN_FREE_DISK_BYTES
    jobs: JobSettings = JobSettings()  # FUSEFORGE_JOBS__MAX_RUNTIME_S=28800
    janitor: JanitorSettings = JanitorSettings()  # FUSEFORGE_JANITOR__INTERVAL_S=10
    model_limits: ModelLimitSettings = ModelLimitSettings()  # FUSEFORGE_MODEL_LIMITS__MAX_DIM=4096
    model_check: ModelCheckSettings = ModelCheckSettings()  # FUSEFORGE_MODEL_CHECK__AT_ONCE=4
    http: HttpSettings = HttpSettings()  # FUSEFORGE_HTTP__BODY_IDLE_TIMEOUT_S=10
    webhooks: WebhookSettings = WebhookSettings()  # FUSEFORGE_WEBHOOKS__SECRET=...
    metrics: MetricsSettings = MetricsSettings()  # FUSEFORGE_METRICS__ENABLED=false
    auth: AuthSettings = AuthSettings()  # FUSEFORGE_AUTH__SECRET=...
    idempotency: IdempotencySettings = IdempotencySettings()  # FUSEFORGE_IDEMPOTENCY__TTL_S=3600
    resumable: ResumableUploadSettings = ResumableUploadSettings()  # FUSEFORGE_RESUMABLE__EXPIRY_S
    retention: RetentionSettings = RetentionSettings()  # FUSEFORGE_RETENTION__ARTIFACTS_DAYS=30
    quota: QuotaSettings = QuotaSettings()  # FUSEFORGE_QUOTA__PROJECT_BYTES=107374182400
    storage: StorageSettings = StorageSettings()  # FUSEFORGE_STORAGE__BACKEND=s3
    # Log lines of the API, worker, janitor and job processes (core/logging_setup.py): "text"
    # to read, "json" (one object a line, with request_id / job_id) for a log pipeline.
    log_format: Literal["text", "json"] = "text"  # FUSEFORGE_LOG_FORMAT
    # "module:attribute" of the TensorRT toolkit GPU workers use (optimizer/backends/tensorrt/toolkit.py);
    # unset means TensorRT itself. The test suite names its FakeTensorRT here.
    tensorrt_toolkit: str | None = None
    # "module:function" of each plug-in, called once at start-up by the API, the worker and every
    # job's process to register its backends and precisions (core/plugins.py). The test suite's
    # stand-in backend is one: FUSEFORGE_PLUGINS='["tests.support.stand_in:register"]'.
    plugins: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _refuse_embedded_defaults_in_prod(self) -> "Settings":
        if self.env != "prod":
            return self
        missing = [
            name
            for name, value in (
                ("FUSEFORGE_DATABASE_URL", self.database_url),
                ("FUSEFORGE_BROKER_URL", self.broker_url),
            )
            if not value
        ]
        secret = self.webhooks.secret
        if (secret is None or secret.strip().lower() in _PLACEHOLDER_SECRETS
                or len(secret) < _MIN_SECRET_LENGTH):
            missing.append(f"FUSEFORGE_WEBHOOKS__SECRET (a random string of at least "
                           f"{_MIN_SECRET_LENGTH} characters, e.g. `openssl rand -hex 32`)")
        if missing:
            raise ValueError(
                f"FUSEFORGE_ENV=prod refuses the embedded defaults: set {', '.join(missing)}"
            )
        if not self.auth.enabled:
            raise ValueError("FUSEFORGE_ENV=prod refuses to run without API keys: unset "
                             "FUSEFORGE_AUTH__ENABLED (or set it to true)")
        secret = self.auth.secret.get_secret_value() if self.auth.secret else ""
        if secret.strip().lower() in _PLACEHOLDER_SECRETS or len(secret) < _MIN_SECRET_LENGTH:
            raise ValueError(
                "FUSEFORGE_ENV=prod refuses an absent, placeholder or short API key secret: set "
                f"FUSEFORGE_AUTH__SECRET to {_MIN_SECRET_LENGTH}+ random characters, e.g. the "
                "output of `python -c 'import secrets; print(secrets.token_urlsafe(48))'`")
        return self

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'fuseforge.sqlite').resolve()}"

    @property
    def resolved_broker_url(self) -> str:
        # kombu's SQLAlchemy transport: a real broker with acks and redelivery, no service to run.
        return self.broker_url or f"sqla+sqlite:///{(self.data_dir / 'broker.sqlite').resolve()}"

    @property
    def resolved_webhook_secret(self) -> str:
        """The webhook signing key: the configured one, else the embedded default, generated
        once into data_dir so the API, the workers and restarts share it."""
        if self.webhooks.secret:
            return self.webhooks.secret
        path = self.data_dir / "webhook-secret"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with path.open("x") as file:  # the first process to get here writes it
                    file.write(secrets.token_hex(32))
                path.chmod(0o600)
            except FileExistsError:
                pass
        return path.read_text().strip()

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def object_cache_dir(self) -> Path:
        """Local copies of objects a remote store handed out by path (`local_path`)."""
        return self.data_dir / "object-cache"

    @property
    def uploads_dir(self) -> Path:
        """Where uploads stream to before they are checked and stored."""
        return self.data_dir / "uploads"

    @property
    def scratch_dir(self) -> Path:
        return self.data_dir / "scratch"

    @property
    def locks_dir(self) -> Path:
        return self.data_dir / "locks"

    @property
    def auth_secret_file(self) -> Path:
        """Where the generated API key secret lives when FUSEFORGE_AUTH__SECRET is unset."""
        return self.data_dir / "secret"


@lru_cache
def get_settings() -> Settings:
    """The settings from the environment (FUSEFORGE_* variables), read once.

    Raises:
        InvalidSettings: a variable's value is refused (its message names the variable).
    """
    try:
        return Settings()
    except ValidationError as err:
        raise InvalidSettings(_settings_problems(err)) from None


def _settings_problems(err: ValidationError) -> str:
    """pydantic's errors as "FUSEFORGE_X: what is wrong" items; a rule between settings
    already names its variables."""
    config = Settings.model_config
    prefix, nested = config.get("env_prefix", ""), config.get("env_nested_delimiter") or "__"
    problems = []
    for error in err.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        location = [str(part) for part in error["loc"]]
        if location:
            message = f"{prefix}{nested.join(location).upper()}: {message}"
        problems.append(message)
    return ("invalid settings: " + "; ".join(problems)
            + " (set them in the environment; README: Configuration)")
