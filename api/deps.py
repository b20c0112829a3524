"""FastAPI dependencies: settings, the caller's project (from its API key), a database session,
the artifact store, the upload body and the job dispatcher (which also answers for the broker's
health)."""

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from api.services.errors import CsrfRejected, MalformedRequest, Unauthorized, UploadNotFound
from api.services.jobs.documents import JobDocumentCache
from api.services.models import new_upload_key
from api.services.uploads import resumable
from api.services.uploads.model_checks import ModelChecker
from api.services.uploads.quota import UploadRoom, upload_room
from api.services.uploads.receive import ReceivedFile, receive_upload
from api.services.verified_keys import VerifiedKeys
from core.api_keys import active_key, key_digest, server_secret
from core.browser_sessions import CSRF_HEADER, SESSION_COOKIE, csrf_matches
from core.db.models import DEFAULT_PROJECT_ID, Model, ResumableUpload
from core.db.session import get_read_sessionmaker, get_sessionmaker
from core.dispatch import JobDispatcher, dispatcher_for
from core.settings import Settings, get_settings
from core.storage import ArtifactStore, ObjectWriter, artifact_store

__all__ = [
    "UNAUTHORIZED",
    "CurrentProject",
    "DispatcherDep",
    "JobCacheDep",
    "ModelCheckerDep",
    "ReadSessionsDep",
    "ReceivedModelUploadDep",
    "ReceivedUploadDep",
    "SessionDep",
    "Sessions",
    "SettingsDep",
    "StoreDep",
    "get_api_settings",
    "get_current_project",
    "get_dispatcher",
    "get_job_cache",
    "get_model_checker",
    "get_read_sessions",
    "get_session",
    "get_store",
]

async def get_api_settings() -> Settings:
    """The settings (tests override this). Cheap dependencies are `async`: FastAPI runs a sync
    one on a worker thread, and on the status-read path those hops cost more than the work."""
    return get_settings()


SettingsDep = Annotated[Settings, Depends(get_api_settings)]


def get_session(request: Request) -> Iterator[Session]:
    """A session for the request: GET and HEAD read only (on SQLite, without taking the write
    lock every status read would otherwise queue on), other methods may write."""
    reads_only = request.method in ("GET", "HEAD")
    sessions = get_read_sessionmaker() if reads_only else get_sessionmaker()
    with sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


async def get_store(settings: SettingsDep) -> ArtifactStore:
    return artifact_store(settings)


StoreDep = Annotated[ArtifactStore, Depends(get_store)]


async def get_dispatcher(settings: SettingsDep) -> JobDispatcher:
    """Sends jobs to the configured broker; tests override it to point at another broker."""
    return dispatcher_for(settings.resolved_broker_url)


DispatcherDep = Annotated[JobDispatcher, Depends(get_dispatcher)]


async def get_job_cache(request: Request) -> JobDocumentCache:
    """This app's cache of job documents (made with the app: tests get a fresh one)."""
    cache: JobDocumentCache = request.app.state.job_cache
    return cache


JobCacheDep = Annotated[JobDocumentCache, Depends(get_job_cache)]

Sessions = Callable[[], AbstractContextManager[Session]]


async def get_read_sessions() -> Sessions:
    """Opens read-only sessions, for routes that answer from a cache when they can and open a
    session (on a worker thread) only when they must."""
    return get_read_sessionmaker()


ReadSessionsDep = Annotated[Sessions, Depends(get_read_sessions)]


async def get_model_checker(request: Request) -> ModelChecker:
    """This app's model checker: uploads are checked in child processes, a few at a time."""
    checker: ModelChecker = request.app.state.model_checker
    return checker


ModelCheckerDep = Annotated[ModelChecker, Depends(get_model_checker)]


# The one answer to a missing, malformed, unknown, revoked or expired key.
UNAUTHORIZED = ("a valid API key is required: send it as the header `Authorization: Bearer "
                "<key>`; `fuseforge apikey create --project <project> --name <name>` makes one")


# Reads the header and documents the scheme in OpenAPI (/docs gets an "Authorize" button); the
# refusals are ours, so that every one of them is the same 401.
_bearer = HTTPBearer(auto_error=False, description="an API key: `fuseforge apikey create`")


async def get_current_project(
    request: Request,
    settings: SettingsDep,
    sessions: ReadSessionsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> uuid.UUID:
    """The project of the request's API key (`Authorization: Bearer <key>`, or the dashboard's
    session cookie); every /v1 router depends on it, so it runs before a body is read. With
    auth off (dev and test only) every request acts as the default project. A key checked
    within FUSEFORGE_AUTH__KEY_CACHE_S is not read again.

    Raises:
        Unauthorized: no key, or a key that is malformed, unknown, revoked or expired (one
            message for all).
        CsrfRejected: a cookie-signed request that may change something, without the page's
            CSRF token.
    """
    if not settings.auth.enabled:
        return DEFAULT_PROJECT_ID
    secret = server_secret(settings)
    key = credentials.credentials.strip() if credentials is not None else ""
    if not key and (key := request.cookies.get(SESSION_COOKIE, "").strip()):
        _check_csrf(request, secret, key)
    if not key:
        raise Unauthorized(UNAUTHORIZED)
    verified: VerifiedKeys = request.app.state.verified_keys
    digest = key_digest(secret, key)
    if (project := verified.project(digest)) is not None:
        return project

    def lookup() -> uuid.UUID | None:
        with sessions() as session:
            row = active_key(session=session, secret=secret, key=key)
            if row is None:
                return None
            verified.remember(digest, row.project_id, row.expires_at)
            return row.project_id

    project = await run_in_threadpool(lookup)
    if project is None:
        raise Unauthorized(UNAUTHORIZED)
    return project


def _check_csrf(request: Request, secret: bytes, key: str) -> None:
    """A browser's request may read with its cookie alone; one that may change something must
    also carry the token its page was rendered with (core/browser_sessions.py)."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if not csrf_matches(secret, key, request.headers.get(CSRF_HEADER)):
        raise CsrfRejected(
            f"{request.method} {request.url.path} came with the dashboard's session cookie but "
            f"without a valid {CSRF_HEADER} header; reload the page and try again (scripts "
            "send `Authorization: Bearer <key>` instead)")


CurrentProject = Annotated[uuid.UUID, Depends(get_current_project)]


async def get_received_upload(
    request: Request,
    settings: SettingsDep,
    sessions: ReadSessionsDep,
    project: CurrentProject,
    name: Annotated[str | None, Query(max_length=255)] = None,
) -> ReceivedFile:
    """The dependency that streams the request body (multipart `file` or raw octet-stream)
    into a temporary file, held to FUSEFORGE_MAX_UPLOAD_BYTES and to the room the project's
    quota leaves; the service that takes it must keep or discard what it received."""
    return await _received(request, settings, sessions, project, name, model=False, into=None)


async def get_received_model_upload(
    request: Request,
    settings: SettingsDep,
    sessions: ReadSessionsDep,
    project: CurrentProject,
    store: StoreDep,
    name: Annotated[str | None, Query(max_length=255)] = None,
    upload_id: Annotated[uuid.UUID | None, Query(
        description="a finished resumable upload (/v1/uploads) to make the model of, "
                    "instead of the request's body")] = None,
) -> ReceivedFile:
    """As get_received_upload, but straight into the artifact store, as an object not shown
    until the service commits it (no local copy of the file), its skeleton built on the way
    (its check then reads no weights: api/services/uploads/model_checks.py); or, with
    `upload_id`, from a finished resumable upload's pieces."""
    def into() -> ObjectWriter:
        return store.open_writer(new_upload_key())

    if upload_id is None:
        return await _received(request, settings, sessions, project, name, model=True,
                               into=into)
    upload = await run_in_threadpool(_finished_upload, sessions, project, upload_id)
    if upload.model_sha256 is not None:  # a repeat: the model it was made into is found
        return ReceivedFile(upload.filename, name, upload.model_sha256, upload.length)
    return await _received(request, settings, sessions, project, name or upload.filename,
                           model=True, into=into, body=resumable.stored_bytes(store, upload),
                           body_length=upload.length)


def _finished_upload(sessions: Sessions, project: uuid.UUID, upload_id: uuid.UUID
                     ) -> ResumableUpload:
    with sessions() as session:
        upload = resumable.find_upload(session, project, upload_id, finished=True)
        if upload.model_sha256 is not None and session.scalar(select(Model.id).where(
                Model.project_id == project, Model.sha256 == upload.model_sha256)) is None:
            raise UploadNotFound(f"upload {upload_id} was made into a model that has since been "
                                 "deleted, and its bytes went with it; upload the file again")
        return upload


async def _received(request: Request, settings: Settings, sessions: Sessions,
                    project: uuid.UUID, name: str | None, *, model: bool,
                    into: Callable[[], ObjectWriter] | None,
                    body: AsyncIterator[bytes] | None = None,
                    body_length: int | None = None) -> ReceivedFile:
    """The upload in the request's body, or in `body` (a finished resumable upload's pieces,
    `body_length` bytes: as if it were the request's raw octet-stream body)."""
    quota = None
    if (limit := settings.quota.project_bytes) is not None:
        quota = await run_in_threadpool(_upload_room, sessions, project, limit)
    try:
        return await receive_upload(
            chunks=request.stream() if body is None else body,
            content_type=(request.headers.get("content-type", "") if body is None
                          else "application/octet-stream"),
            content_length=_content_length(request) if body is None else body_length,
            temp_dir=settings.uploads_dir,
            max_bytes=settings.max_upload_bytes,
            raw_name=name,
            quota=quota,
            model=model,
            into=into,
        )
    except ClientDisconnect as err:  # nobody reads the answer, but it is no server error
        raise MalformedRequest("the client disconnected before the request body was complete") from err


def _content_length(request: Request) -> int | None:
    length = request.headers.get("content-length")
    if length is None:
        return None
    if not length.isascii() or not length.isdigit():
        raise MalformedRequest(f"the Content-Length header {length[:40]!r} is not a byte count")
    return int(length)


def _upload_room(sessions: Sessions, project: uuid.UUID, limit_bytes: int) -> UploadRoom:
    with sessions() as session:
        return upload_room(session, project, limit_bytes)


ReceivedUploadDep = Annotated[ReceivedFile, Depends(get_received_upload)]
ReceivedModelUploadDep = Annotated[ReceivedFile, Depends(get_received_model_upload)]
