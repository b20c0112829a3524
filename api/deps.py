"""FastAPI dependencies: settings, a database session, the artifact store and job dispatch."""

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session

from api.db.models import Job
from api.db.session import get_sessionmaker
from api.services.uploads import ReceivedFile, receive_upload
from api.settings import Settings, get_settings
from api.storage import ArtifactStore, LocalArtifactStore
from worker.celery_app import RUN_JOB_TASK, celery_app, job_queue

__all__ = [
    "DispatchDep",
    "ReceivedUploadDep",
    "SessionDep",
    "SettingsDep",
    "StoreDep",
    "get_dispatch",
    "get_session",
    "get_store",
]

SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_session() -> Iterator[Session]:
    with get_sessionmaker()() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


async def get_received_upload(
    request: Request,
    settings: SettingsDep,
    name: Annotated[str | None, Query(max_length=255)] = None,
) -> ReceivedFile:
    """The request body streamed to a temporary file (multipart `file` or raw octet-stream);
    the service that takes it must move or delete the file."""
    length = request.headers.get("content-length")
    return await receive_upload(
        chunks=request.stream(),
        content_type=request.headers.get("content-type", ""),
        content_length=int(length) if length and length.isdigit() else None,
        temp_dir=settings.data_dir / "uploads",
        max_bytes=settings.max_upload_bytes,
        raw_name=name,
    )


ReceivedUploadDep = Annotated[ReceivedFile, Depends(get_received_upload)]


def get_store(settings: SettingsDep) -> ArtifactStore:
    return LocalArtifactStore(settings.artifacts_dir)


StoreDep = Annotated[ArtifactStore, Depends(get_store)]


def send_run_job(job: Job) -> None:
    """Send the job id (and nothing else: the database holds the job) to its queue: the backend's,
    or a GPU's own queue when the job names a `target_gpu`."""
    queue = job_queue(job.config)
    celery_app.send_task(
        RUN_JOB_TASK,
        args=[str(job.id)],
        queue=queue,
        retry=True,
        retry_policy={"max_retries": 3, "interval_start": 0, "interval_step": 0.5},
    )


def get_dispatch() -> Callable[[Job], None]:
    return send_run_job


DispatchDep = Annotated[Callable[[Job], None], Depends(get_dispatch)]
