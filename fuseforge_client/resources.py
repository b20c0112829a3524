"""What the client returns: typed views of the server's JSON documents.

Each keeps the whole document in `data`, so fields this client does not model yet (a fusion
report, an engine report) are still at hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FINAL_STATUSES", "Artifact", "Dataset", "Job", "JobOutcome", "JobPage", "Model",
           "Shipped", "SpeedupVerdict"]

FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
# The job error code of an engine whose outputs are outside the tolerances (optimizer/errors.py).
_ACCURACY_MISMATCH = "AccuracyMismatchError"


@dataclass(frozen=True)
class Model:
    """An uploaded ONNX model (GET /v1/models/{id})."""

    id: str
    name: str
    sha256: str
    size_bytes: int
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Model:
        return cls(id=str(data["id"]), name=str(data["name"]), sha256=str(data["sha256"]),
                   size_bytes=int(data["size_bytes"]), data=data)


@dataclass(frozen=True)
class Dataset:
    """An uploaded .npz validation dataset (GET /v1/datasets/{id})."""

    id: str
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Dataset:
        return cls(id=str(data["id"]), data=data)


@dataclass(frozen=True)
class Artifact:
    """A file a job produced; `url` is relative to the server's base URL."""

    name: str
    kind: str
    size_bytes: int
    sha256: str
    url: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Artifact:
        return cls(name=str(data["name"]), kind=str(data["kind"]),
                   size_bytes=int(data["size_bytes"]), sha256=str(data["sha256"]),
                   url=str(data["url"]))


@dataclass(frozen=True)
class Shipped:
    """What a job shipped: an engine (`what` "engine"), or the user's own model unchanged
    ("original") when nothing beat it."""

    what: str
    backend: str
    precision: str
    passes: tuple[str, ...]
    label: str  # e.g. "onnxruntime fp32 engine", "original model"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shipped:
        return cls(what=str(data["what"]), backend=str(data["backend"]),
                   precision=str(data["precision"]),
                   passes=tuple(str(p) for p in data.get("passes") or ()),
                   label=str(data["label"]))


@dataclass(frozen=True)
class SpeedupVerdict:
    """The shipped engine's speed-up over the original, its 95% interval and the server's
    verdict ("faster", "slower", "no measurable difference"): trust the verdict, not `value`."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SpeedupVerdict:
        return cls(value=_number(data.get("value")), ci_low=_number(data.get("ci_low")),
                   ci_high=_number(data.get("ci_high")), verdict=data.get("verdict"))


@dataclass(frozen=True)
class JobOutcome:
    """A finished job's outcome (the server's `outcome`): what was asked, what shipped, the
    speed-up and accuracy verdicts, why shipped differs from asked, and `headline`, the one
    sentence the server, the dashboard and the CLI print."""

    headline: str
    asked: Mapping[str, Any]  # {"backend", "precision", "mode", "passes", "search"}
    shipped: Shipped | None  # None: nothing shipped (failed or cancelled)
    speedup: SpeedupVerdict | None
    accuracy_verdict: str | None  # "passed", "failed", "not judged"; None: the original shipped
    worst_metric: Mapping[str, Any] | None  # {"output", "metric", "value", "limit", "text"}
    why: str | None
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobOutcome:
        shipped, speedup = data.get("shipped"), data.get("speedup")
        accuracy = data.get("accuracy") or {}
        return cls(headline=str(data["headline"]), asked=data.get("asked") or {},
                   shipped=Shipped.from_json(shipped) if shipped else None,
                   speedup=SpeedupVerdict.from_json(speedup) if speedup else None,
                   accuracy_verdict=accuracy.get("verdict"), worst_metric=accuracy.get("worst"),
                   why=data.get("why"), data=data)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Job:
    """An optimization job (GET /v1/jobs/{id}): status queued → running → succeeded | failed |
    cancelled, the stage it is at, progress in [0, 1]."""

    id: str
    model_id: str
    status: str
    stage: str | None
    progress: float
    error_code: str | None
    error_message: str | None
    artifacts: tuple[Artifact, ...]
    data: Mapping[str, Any] = field(repr=False)
    # what the finished job asked for and shipped, and its headline; None while it runs
    outcome: JobOutcome | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        error = data.get("error") or {}
        outcome = data.get("outcome")
        return cls(
            id=str(data["id"]), model_id=str(data["model_id"]), status=str(data["status"]),
            stage=data.get("stage"), progress=float(data.get("progress") or 0.0),
            error_code=error.get("code"), error_message=error.get("message"),
            artifacts=tuple(Artifact.from_json(a) for a in data.get("artifacts") or ()),
            data=data, outcome=JobOutcome.from_json(outcome) if outcome else None,
        )

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def validation_passed(self) -> bool | None:
        """True/False once validation ran; None before (or when the job failed earlier)."""
        validation = self.data.get("validation")
        return None if validation is None else bool(validation.get("passed"))

    @property
    def failed_validation(self) -> bool:
        """The job failed because its engine's outputs were outside the tolerances."""
        return self.status == "failed" and (
            self.error_code == _ACCURACY_MISMATCH or self.validation_passed is False)

    @property
    def speedup(self) -> float | None:
        """The engine's speed-up over the original model, as the job benchmarked them
        (median of reference/engine latency ratios; onnxruntime: the original at ONNX
        Runtime's default level); None before the benchmark stage. The record's
        speedup_ci_low/high and speedup_verdict say how sure it is."""
        for record in self.data.get("benchmarks") or ():
            if record.get("suite") == "comparison" and record.get("variant") == "engine":
                value = record.get("speedup_vs_reference")
                return None if value is None else float(value)
        return None

    @property
    def regression(self) -> Mapping[str, Any] | None:
        """The engine's regression when the server flagged one: a lower speed-up over the
        original (each job times the original beside its engine) than the model's best earlier
        engine of the same shipped configuration and environment, beyond both intervals
        ({"against_job", "speedup", "speedup_ci", "against_speedup", "against_speedup_ci",
        "latency_ms_p50", "against_latency_ms_p50", "slowdown", "detail"}); None when not
        flagged (or not benchmarked yet)."""
        regression = self.data.get("regression")
        return regression if isinstance(regression, Mapping) else None

    @property
    def search_report(self) -> Mapping[str, Any] | None:
        """A finished search job's outcome ({"strategy", "winner", "why", "recipe", "rows",
        "race", "resumed", "time_budget_s", "elapsed_s"}: the candidates' table, why each
        lost, and the job config that rebuilds the winner); None for any other job."""
        report = self.data.get("search_report")
        return report if isinstance(report, Mapping) else None


@dataclass(frozen=True)
class JobPage:
    """A page of the project's jobs (GET /v1/jobs), newest first: each item is a job summary
    (no artifacts, events or reports: `FuseForgeClient.get_job` reads the whole job); `total`
    counts every job that matches the filters."""

    items: tuple[Job, ...]
    total: int
    limit: int
    offset: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobPage:
        return cls(items=tuple(Job.from_json(item) for item in data.get("items") or ()),
                   total=int(data["total"]), limit=int(data["limit"]),
                   offset=int(data["offset"]))
