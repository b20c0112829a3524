"""Jobs as the API shows them, read with a few plain queries and serialized once.

Status polling is the API's hottest path, so this skips the ORM's identity map and object
loading: one query for the job row (with its model's name) and one per child table, a page of
the list in three (api/services/jobs/summaries.py), columns straight into the response
schema, and the JSON bytes returned as they are (FastAPI would otherwise validate the model a
second time). A job that has ended changes only when it is deleted or retention removes its
artifacts or events, so its bytes are kept in a small per-process cache for a while
(`FINAL_FRESH_S`); a queued or running job, and a page of the list, are kept for the short
`read_cache_s` so polling clients share reads. Documents are read and cached per project:
another project's job is None, as an unknown one is.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from api.schemas.jobs import JobList, JobRead
from api.services.jobs.stage_durations import job_stage_seconds
from api.services.jobs.summaries import (
    BACKEND,
    headline,
    read_summaries,
    summary_fields,
    summary_select,
    validation_verdict,
)
from core.db.models import (
    Artifact,
    BenchmarkRecord,
    BenchmarkSuite,
    Job,
    JobEvent,
    JobStatus,
    Model,
    ValidationResult,
    WebhookDelivery,
)
from core.db.types import utc_now
from core.reports import REPORT_COLUMNS

__all__ = ["JobDocumentCache", "job_document", "job_key", "job_list_document", "list_key"]

_FINAL = frozenset({JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value})
# How long an ended job's document may be served: a delete by another API process, or the
# janitor's retention, shows within this long (this process forgets its own deletes at once).
FINAL_FRESH_S = 300.0
_JOB = (summary_select(Job.id == bindparam("job_id"), Job.project_id == bindparam("project_id"))
        .add_columns(Job.config, Job.worker, Job.attempts,
                     *(getattr(Job, column) for column in REPORT_COLUMNS)))
_ARTIFACTS = (select(Artifact.name, Artifact.kind, Artifact.size_bytes, Artifact.sha256,
                     Artifact.expired_at)
              .where(Artifact.job_id == bindparam("job_id")).order_by(Artifact.name))
_VALIDATION = (select(ValidationResult.output_name.label("name"), ValidationResult.samples,
                      ValidationResult.max_abs_err, ValidationResult.max_rel_err,
                      ValidationResult.mean_abs_err, ValidationResult.cosine_similarity,
                      ValidationResult.atol, ValidationResult.rtol, ValidationResult.min_cosine,
                      ValidationResult.passed, ValidationResult.metrics)
               .where(ValidationResult.job_id == bindparam("job_id"))
               .order_by(ValidationResult.output_name))
_BENCHMARKS = (select(*(c for c in BenchmarkRecord.__table__.c
                        if c.name not in ("id", "job_id", "created_at")))
               .where(BenchmarkRecord.job_id == bindparam("job_id")).order_by(BenchmarkRecord.id))
_EVENTS = (select(JobEvent.stage, JobEvent.message, JobEvent.created_at)
           .where(JobEvent.job_id == bindparam("job_id")).order_by(JobEvent.id))
_DELIVERIES = (select(WebhookDelivery.attempt, WebhookDelivery.event, WebhookDelivery.status_code,
                      WebhookDelivery.error, WebhookDelivery.duration_ms,
                      WebhookDelivery.created_at.label("at"), WebhookDelivery.final)
               .where(WebhookDelivery.job_id == bindparam("job_id"))
               .order_by(WebhookDelivery.attempt))


class JobDocumentCache:
    """JSON documents of jobs and job-list pages, for one API process.

    An ended job's document is kept `final_s` seconds (the `size` most recently read): it
    changes only when the job is deleted or retention expires its artifacts or events.
    Anything else lives `fresh_s` seconds, so clients polling a running job or the list share
    one read per interval; `forget_changing()` drops those at once (after this process's own
    writes, so a client sees what it just did), `forget_jobs()` deleted jobs too.
    """

    def __init__(self, fresh_s: float, size: int = 4096, final_s: float = FINAL_FRESH_S) -> None:
        self._fresh_s = fresh_s
        self._final_s = final_s
        self._size = size
        self._final: OrderedDict[Hashable, tuple[float, bytes]] = OrderedDict()
        self._changing: dict[Hashable, tuple[float, bytes]] = {}
        self._lock = threading.Lock()
        self._loading: dict[Hashable, asyncio.Lock] = {}  # used on the event loop only

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            if (final := self._final.get(key)) is not None:
                if time.monotonic() - final[0] <= self._final_s:
                    self._final.move_to_end(key)
                    return final[1]
                del self._final[key]
            entry = self._changing.get(key)
            if entry is None or time.monotonic() - entry[0] > self._fresh_s:
                return None
            return entry[1]

    def put(self, key: Hashable, document: bytes, *, final: bool) -> None:
        with self._lock:
            if final:
                self._final[key] = (time.monotonic(), document)
                self._final.move_to_end(key)
                while len(self._final) > self._size:
                    self._final.popitem(last=False)
                self._changing.pop(key, None)
            elif self._fresh_s > 0:
                if len(self._changing) >= self._size:
                    self._changing.clear()  # old entries are stale anyway
                self._changing[key] = (time.monotonic(), document)

    def forget_changing(self) -> None:
        with self._lock:
            self._changing.clear()

    def forget_jobs(self, project_id: uuid.UUID, job_ids: Iterable[uuid.UUID]) -> None:
        """Drop deleted jobs' documents, and the list pages that showed them."""
        with self._lock:
            for job_id in job_ids:
                self._final.pop(job_key(project_id=project_id, job_id=job_id), None)
            self._changing.clear()

    async def fetch(self, key: Hashable,
                    load: Callable[[], Awaitable[bytes | None]]) -> bytes | None:
        """The cached document for `key`, else `load()`'s. One load per key at a time: while it
        runs, other requests get the document it replaces (a little older than `fresh_s`), or
        wait for it when there is none, instead of all reading the database at once (which,
        at a few hundred connections, would stall them all)."""
        document = self.get(key)
        if document is not None:
            return document
        lock = self._loading.setdefault(key, asyncio.Lock())
        if lock.locked() and (stale := self._stale(key)) is not None:
            return stale
        async with lock:
            document = self.get(key)
            if document is None:
                document = await load()
        if not lock.locked():
            self._loading.pop(key, None)
        return document

    def _stale(self, key: Hashable) -> bytes | None:
        with self._lock:
            entry = self._changing.get(key)
            return entry[1] if entry is not None else None


def job_key(*, project_id: uuid.UUID, job_id: uuid.UUID) -> Hashable:
    """The cache key of a job's document: per project, so no key reads another's from cache."""
    return ("job", project_id, job_id)


def job_document(session: Session, project_id: uuid.UUID, job_id: uuid.UUID,
                 cache: JobDocumentCache) -> bytes | None:
    """The project's job as `JobRead` JSON, read now (and kept in `cache` under `job_key`);
    None if the project has no such job."""
    connection = session.connection()
    row = connection.execute(_JOB, {"job_id": job_id, "project_id": project_id}
                             ).mappings().one_or_none()
    params = {"job_id": job_id}
    if row is None:
        return None
    outputs = [dict(r) for r in connection.execute(_VALIDATION, params).mappings()]
    deliveries = [dict(r) for r in connection.execute(_DELIVERIES, params).mappings()]
    benchmarks = _benchmarks(connection.execute(_BENCHMARKS, params).mappings())
    events = [dict(r) for r in connection.execute(_EVENTS, params).mappings()]
    document = JobRead.model_validate({
        **summary_fields(row, headline=headline(benchmarks),
                         validation_passed=validation_verdict(outputs)),
        "config": row["config"],
        "worker": row["worker"],
        "attempts": row["attempts"],
        "artifacts": [{**r, "url": f"/v1/jobs/{job_id}/artifacts/{r['name']}"}
                      for r in connection.execute(_ARTIFACTS, params).mappings()],
        **{column: row[column] for column in REPORT_COLUMNS},
        "validation": ({"passed": validation_verdict(outputs), "outputs": outputs}
                       if outputs else None),
        "benchmarks": benchmarks,
        "events": events,
        "stage_seconds": job_stage_seconds(events, row["finished_at"], now=utc_now()),
        "webhook_deliveries": deliveries,
    }).model_dump_json().encode()
    # An ended job still changes while its webhook is being delivered.
    settled = not (row["config"] or {}).get("callback_url") or any(d["final"] for d in deliveries)
    cache.put(job_key(project_id=project_id, job_id=job_id), document,
              final=row["status"] in _FINAL and settled)
    return document


def job_list_document(session: Session, cache: JobDocumentCache, *, project_id: uuid.UUID,
                      limit: int, offset: int, status: JobStatus | None = None,
                      model_id: uuid.UUID | None = None, backend: str | None = None,
                      q: str | None = None) -> bytes:
    """A page of the project's job summaries, newest first, as `JobList` JSON, read now (and
    kept in `cache` under `list_key(...)`). Filters combine: `status`, `model_id` and `backend`
    exactly, `q` a case-insensitive part of the model's name."""
    conditions = [Job.project_id == project_id]
    if status is not None:
        conditions.append(Job.status == status.value)
    if model_id is not None:
        conditions.append(Job.model_id == model_id)
    if backend is not None:
        conditions.append(BACKEND == backend)
    if q:
        conditions.append(Model.name.icontains(q, autoescape=True))  # "%" and "_" are literal
    connection = session.connection()
    counted = select(func.count()).select_from(Job)
    if q:
        counted = counted.join(Model, Model.id == Job.model_id)
    total = connection.execute(counted.where(*conditions)).scalar()
    items = read_summaries(connection, summary_select(*conditions)
                           .order_by(Job.created_at.desc(), Job.id.desc())
                           .limit(limit).offset(offset))
    document = JobList(items=items, total=total or 0, limit=limit,
                       offset=offset).model_dump_json().encode()
    cache.put(list_key(project_id=project_id, limit=limit, offset=offset, status=status,
                       model_id=model_id, backend=backend, q=q), document, final=False)
    return document


def list_key(*, project_id: uuid.UUID, limit: int, offset: int, status: JobStatus | None,
             model_id: uuid.UUID | None, backend: str | None = None,
             q: str | None = None) -> Hashable:
    """The cache key of a page of the project's job list, with every filter that shaped it."""
    return ("list", project_id, limit, offset, status, model_id, backend, q)


def _benchmarks(rows: Any) -> list[dict[str, Any]]:
    # Plain dicts: JobRead validates them into BenchmarkRead once, with the document.
    records = [dict(r) for r in rows]
    ablation = [r for r in records if r["suite"] == BenchmarkSuite.ABLATION]
    for previous, current in zip(ablation, ablation[1:], strict=False):
        # Each stage adds fusions to the previous one; a slower stage is reported as such.
        current["slower_than_previous"] = current["latency_ms_p50"] > previous["latency_ms_p50"]
    return records
