"""FastAPI dependencies: settings, a database session, the artifact store and job dispatch."""

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from api.db.models import Job
from api.db.session import get_sessionmaker
from api.settings import Settings, get_settings
from api.storage import ArtifactStore, LocalArtifactStore
from worker.celery_app import JOB_QUEUE_BY_BACKEND, RUN_JOB_TASK, celery_app

__all__ = [
    "DispatchDep",
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


def get_store(settings: SettingsDep) -> ArtifactStore:
    return LocalArtifactStore(settings.artifacts_dir)


StoreDep = Annotated[ArtifactStore, Depends(get_store)]


def send_run_job(job: Job) -> None:
    """Send the job id (and nothing else: the database holds the job) to its backend's queue."""
    queue = JOB_QUEUE_BY_BACKEND[job.config["backend"]]
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
