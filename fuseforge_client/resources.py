"""What the client returns: typed views of the server's JSON documents.

Each keeps the whole document in `data`, so fields this client does not model yet (a fusion
report, an engine report) are still at hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FINAL_STATUSES", "Artifact", "Dataset", "Job", "JobPage", "Model"]

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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        error = data.get("error") or {}
        return cls(
            id=str(data["id"]), model_id=str(data["model_id"]), status=str(data["status"]),
            stage=data.get("stage"), progress=float(data.get("progress") or 0.0),
            error_code=error.get("code"), error_message=error.get("message"),
            artifacts=tuple(Artifact.from_json(a) for a in data.get("artifacts") or ()),
            data=data,
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
        """The engine's regression when the server flagged one: slower than the model's best
        earlier engine of the same configuration and environment beyond both latency
        intervals ({"against_job", "against_latency_ms_p50", "against_ci", "latency_ms_p50",
        "ci", "slowdown", "detail"}); None when not flagged (or not benchmarked yet)."""
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
