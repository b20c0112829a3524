"""/v1/jobs: start, follow, list, cancel and delete optimization jobs; download their artifacts."""

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import AfterValidator, AwareDatetime
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import (
    CurrentProject,
    DispatcherDep,
    JobCacheDep,
    ReadSessionsDep,
    SessionDep,
    Sessions,
    SettingsDep,
    StoreDep,
    get_current_project,
)
from api.http.artifact_downloads import artifact_download, artifacts_archive
from api.http.idempotent_posts import (
    IdempotentRequestDep,
    JsonFingerprintDep,
    answer_response,
    idempotent_responses,
)
from api.http.openapi_sse import sse_content
from api.http.path_ids import ArtifactNamePath, JobIdPath
from api.schemas import examples
from api.schemas.common import ErrorBody, PageParams
from api.schemas.jobs import JobCreate, JobList, JobRead
from api.services import deletions, idempotency
from api.services.errors import JobNotFound
from api.services.idempotency import Answer
from api.services.jobs import commands as jobs
from api.services.jobs.documents import (
    JobDocumentCache,
    job_document,
    job_key,
    job_list_document,
    list_key,
)
from api.services.jobs.event_stream import EVENT_TYPES, StreamTiming, open_job_event_stream
from api.services.jobs.events import resume_point
from api.services.jobs.list_stream import EVENT_TYPES as LIST_EVENT_TYPES
from api.services.jobs.list_stream import open_job_list_stream, resume_since, utc_instant
from api.services.jobs.plans import plan_job
from core.db.models import JobStatus
from core.job_config import Backend
from optimizer.errors import InternalError

router = APIRouter(prefix="/v1/jobs", tags=["jobs"],
                   dependencies=[Depends(get_current_project)])

T = TypeVar("T")


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else utc_instant(value)


@router.post("", response_model=JobRead, status_code=202,
             responses=idempotent_responses({
                 202: "The job, queued",
                 200: "dry_run=true: the job's plan (nothing stored, nothing queued): the "
                      "config as it would be stored, the fusion rules that fire or refuse "
                      "with the reasons, the candidates (a search's, or the job's one), each "
                      "node class's precision per candidate, and an estimate of the time"}))
def create_job(body: JobCreate, idempotent: IdempotentRequestDep, fingerprint: JsonFingerprintDep,
               session: SessionDep, dispatcher: DispatcherDep, cache: JobCacheDep,
               settings: SettingsDep, project: CurrentProject, store: StoreDep,
               dry_run: Annotated[bool, Query(
                   description="answer the job's plan instead of queueing it")] = False
               ) -> Response:
    if dry_run:  # reads only: an Idempotency-Key has nothing to guard
        return _json(json.dumps(plan_job(session=session, project_id=project, spec=body,
                                         store=store, webhooks=settings.webhooks)).encode())

    def create() -> Answer:
        job = jobs.create_job(session=session, project_id=project, spec=body,
                              dispatcher=dispatcher, webhooks=settings.webhooks)
        cache.forget_changing()  # the list this client reads next shows its job
        return Answer(202, _document_bytes(session, project, job.id, cache))

    return answer_response(idempotency.answer_once(
        session=session, request=idempotent, fingerprint=fingerprint,
        settings=settings.idempotency, produce=create))


@router.get("", response_model=JobList)
async def list_jobs(
    page: Annotated[PageParams, Query()],
    cache: JobCacheDep,
    sessions: ReadSessionsDep,
    project: CurrentProject,
    status: JobStatus | None = None,
    model_id: uuid.UUID | None = None,
    backend: Annotated[Backend | None, Query(description="only jobs on this backend")] = None,
    # No control characters: no model's name holds one (uploads refuse them), and PostgreSQL
    # refuses a NUL in any text.
    q: Annotated[str | None, Query(
        max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$",
        description="only jobs whose model's name contains this (case-insensitive; "
                    "printable characters)")] = None,
) -> Response:
    # async, answered from the cache without a worker thread when it can (see job_documents).
    document = await cache.fetch(
        list_key(project_id=project, limit=page.limit, offset=page.offset, status=status,
                 model_id=model_id, backend=backend, q=q),
        lambda: run_in_threadpool(_read, sessions, lambda session: job_list_document(
            session, cache, project_id=project, limit=page.limit, offset=page.offset,
            status=status, model_id=model_id, backend=backend, q=q)))
    if document is None:
        raise InternalError("a page of the job list came back empty-handed")
    return _json(document)


_JOB_STREAM_EXAMPLE = (
    'id: 2026-12-01T22:30:56.220119+00:00\nevent: ready\ndata: {"since": '
    '"2026-12-01T22:30:00+00:00", "replayed": 0}\n\n'
    'id: 2026-12-01T22:31:02.310877+00:00\nevent: job\ndata: '
    + json.dumps(examples.JOB_SUMMARIES[1]) + "\n\n")


# Before /{job_id}: "stream" is no job id.
@router.get(
    "/stream",
    response_class=StreamingResponse,
    summary="Follow the project's jobs live (Server-Sent Events)",
    responses={
        200: {"description": "A text/event-stream of the project's jobs as they change. Event "
                             "types: " + "; ".join(f"`{name}`: {meaning}"
                                                   for name, meaning in LIST_EVENT_TYPES.items())
              + ". Every event carries `id:`, a time to resume from: reconnect with it as "
                "`since` or Last-Event-ID and no change is missed.",
              "content": sse_content(LIST_EVENT_TYPES, _JOB_STREAM_EXAMPLE)},
        400: {"model": ErrorBody, "description": "Last-Event-ID is not a time with a zone"},
    },
)
async def stream_jobs(
    sessions: ReadSessionsDep,
    settings: SettingsDep,
    project: CurrentProject,
    since: Annotated[AwareDatetime | None, AfterValidator(_utc_or_none), Query(
        description="Send first the jobs created, started or finished at or after this time "
                    "(ISO 8601 with a zone), and every queued or running one; without it the "
                    "stream sends changes from now on")] = None,
    last_event_id: Annotated[str | None, Header(
        description="Resume from this event id (EventSource sends it when it reconnects); "
                    "wins over `since`")] = None,
) -> StreamingResponse:
    """The project's jobs as they change, each as its list item: a jobs table kept current
    without polling GET /v1/jobs."""
    stream = await open_job_list_stream(
        sessions=sessions, project_id=project,
        since=resume_since(last_event_id=last_event_id, since=since),
        timing=StreamTiming.of(settings.http))
    return StreamingResponse(stream, media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # no proxy buffering


@router.get("/{job_id}", response_model=JobRead)
async def read_job(job_id: JobIdPath, cache: JobCacheDep, sessions: ReadSessionsDep,
                   project: CurrentProject) -> Response:
    document = await cache.fetch(job_key(project_id=project, job_id=job_id), lambda: run_in_threadpool(
        _read, sessions, lambda session: job_document(session, project, job_id, cache)))
    if document is None:
        raise JobNotFound.for_job(job_id)
    return _json(document)


_EVENTS_EXAMPLE = (
    'id: 41\nevent: stage\ndata: {"id": 41, "stage": "validate", "message": "stage validate '
    'started", "created_at": "2026-12-01T22:30:00+00:00"}\n\n'
    'event: status\ndata: {"status": "running", "stage": "validate", "progress": 0.6, '
    '"status_detail": null, "error": null}\n\n')


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    summary="Follow a job live (Server-Sent Events)",
    responses={
        200: {"description": "A text/event-stream until the job ends. Event types: " + "; ".join(
                  f"`{name}`: {meaning}" for name, meaning in EVENT_TYPES.items())
              + ". Stored events carry `id:`; reconnect with Last-Event-ID to resume after one.",
              "content": sse_content(EVENT_TYPES, _EVENTS_EXAMPLE)},
        400: {"model": ErrorBody, "description": "Last-Event-ID (or `after`) is not an event id"},
        404: {"model": ErrorBody, "description": "No such job"},
    },
)
async def stream_job_events(
    job_id: JobIdPath,
    sessions: ReadSessionsDep,
    settings: SettingsDep,
    project: CurrentProject,
    last_event_id: Annotated[str | None, Header(
        description="Resume after this event id (EventSource sends it when it reconnects)")
    ] = None,
    after: Annotated[str | None, Query(
        description="Resume after this event id, for clients that cannot set headers; "
                    "Last-Event-ID wins when both are sent")] = None,
) -> StreamingResponse:
    # async: the stream waits on the event loop, not on one of the thread pool's threads.
    stream = await open_job_event_stream(
        sessions=sessions, project_id=project, job_id=job_id,
        after_id=resume_point(last_event_id=last_event_id, after=after),
        timing=StreamTiming.of(settings.http))
    return StreamingResponse(stream, media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})  # no proxy buffering


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(job_id: JobIdPath, session: SessionDep, cache: JobCacheDep,
               dispatcher: DispatcherDep, project: CurrentProject) -> Response:
    jobs.cancel_job(session=session, project_id=project, job_id=job_id, dispatcher=dispatcher)
    cache.forget_changing()
    return _document(session, project, job_id, cache)


def _document(session: Session, project: uuid.UUID, job_id: uuid.UUID,
              cache: JobDocumentCache) -> Response:
    return _json(_document_bytes(session, project, job_id, cache))


def _document_bytes(session: Session, project: uuid.UUID, job_id: uuid.UUID,
                    cache: JobDocumentCache) -> bytes:
    document = job_document(session, project, job_id, cache)
    if document is None:  # it was written a moment ago, and only a finished job is deleted
        raise InternalError(f"job {job_id} vanished right after it was written")
    return document


def _read(sessions: Sessions, read: Callable[[Session], T]) -> T:
    with sessions() as session:
        return read(session)


def _json(document: bytes) -> Response:
    # Already the response schema's JSON: FastAPI would validate and serialize it again.
    return Response(content=document, media_type="application/json")


@router.get(
    "/{job_id}/artifacts/{name}",
    response_class=FileResponse,
    responses={307: {"description": "The artifact store is S3 and presigned downloads are on "
                     "(FUSEFORGE_STORAGE__S3__PRESIGNED_DOWNLOADS): Location is a URL of the "
                     "store that serves the file for FUSEFORGE_STORAGE__S3__PRESIGNED_URL_TTL_S "
                     "seconds. Send no Authorization header there. X-Content-SHA256 is the "
                     "file's hash."},
               410: {"model": ErrorBody, "description": "The artifact's file was removed under "
                     "the retention policy (FUSEFORGE_RETENTION__ARTIFACTS_DAYS)"}},
)
def download_artifact(
    job_id: JobIdPath, name: ArtifactNamePath, session: SessionDep, store: StoreDep,
    project: CurrentProject,
) -> Response:
    """The artifact's bytes, saved as its name; X-Content-SHA256 is their hash."""
    artifact = jobs.get_artifact(session=session, project_id=project, job_id=job_id, name=name)
    return artifact_download(store, artifact)


@router.get(
    "/{job_id}/artifacts.tar",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}},
                     "description": "Every kept artifact of the job in one tar"},
               404: {"model": ErrorBody, "description": "No such job, or it has no artifacts"}},
)
def download_artifacts_archive(job_id: JobIdPath, session: SessionDep, store: StoreDep,
                               project: CurrentProject) -> Response:
    """Every artifact of the job as one uncompressed tar, streamed from the store: an engine
    with its data file (a model over 2 GB), the fused model, the reports. Artifacts removed
    under the retention policy are left out."""
    artifacts = jobs.kept_artifacts(session=session, project_id=project, job_id=job_id)
    return artifacts_archive(store, f"job-{job_id}-artifacts.tar", artifacts)


@router.delete(
    "/{job_id}",
    status_code=204,
    response_class=Response,
    responses={204: {"description": "The job, its records and its files are gone"},
               404: {"model": ErrorBody, "description": "No such job"},
               409: {"model": ErrorBody, "description": "The job is queued or running: cancel "
                     "it first (POST /v1/jobs/{id}/cancel)"}},
)
def delete_job(job_id: JobIdPath, session: SessionDep, store: StoreDep, cache: JobCacheDep,
               project: CurrentProject) -> None:
    """Delete a finished job: its artifacts (files too), validation and benchmark records,
    events and webhook deliveries. Refused with 409 while it is queued or running: cancel it
    first (POST /v1/jobs/{id}/cancel)."""
    deletions.delete_job(session=session, store=store, project_id=project, job_id=job_id)
    cache.forget_jobs(project, [job_id])
