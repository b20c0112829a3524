"""/v1/jobs: start, follow, list and cancel optimization jobs; download their artifacts."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from api.deps import DispatcherDep, SessionDep, StoreDep
from api.path_ids import ArtifactNamePath, JobIdPath
from api.schemas.common import PageParams
from api.schemas.jobs import JobCreate, JobList, JobRead
from api.services import jobs
from api.services.job_views import job_read, job_summary
from core.db.models import JobStatus

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post("", response_model=JobRead, status_code=202)
def create_job(body: JobCreate, session: SessionDep, dispatcher: DispatcherDep) -> JobRead:
    job = jobs.create_job(session=session, spec=body, dispatcher=dispatcher)
    return job_read(jobs.get_job(session=session, job_id=job.id))


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    page: Annotated[PageParams, Query()],
    status: JobStatus | None = None,
    model_id: uuid.UUID | None = None,
) -> JobList:
    rows, total = jobs.list_jobs(
        session=session, limit=page.limit, offset=page.offset, status=status, model_id=model_id
    )
    return JobList(
        items=[job_summary(j) for j in rows], total=total, limit=page.limit, offset=page.offset
    )


@router.get("/{job_id}", response_model=JobRead)
def read_job(job_id: JobIdPath, session: SessionDep) -> JobRead:
    return job_read(jobs.get_job(session=session, job_id=job_id))


@router.post("/{job_id}/cancel", response_model=JobRead)
def cancel_job(job_id: JobIdPath, session: SessionDep) -> JobRead:
    return job_read(jobs.cancel_job(session=session, job_id=job_id))


@router.get("/{job_id}/artifacts/{name}", response_class=FileResponse)
def download_artifact(
    job_id: JobIdPath, name: ArtifactNamePath, session: SessionDep, store: StoreDep
) -> FileResponse:
    artifact = jobs.get_artifact(session=session, job_id=job_id, name=name)
    return FileResponse(
        store.local_path(artifact.uri),
        filename=artifact.name,
        media_type="application/octet-stream",
        headers={"X-Content-SHA256": artifact.sha256},
    )
