"""/v1/models: upload, list, read and delete ONNX models."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from api.deps import (
    CurrentProject,
    JobCacheDep,
    ModelCheckerDep,
    ReceivedModelUploadDep,
    SessionDep,
    SettingsDep,
    StoreDep,
    get_current_project,
)
from api.http.idempotent_posts import IdempotentRequestDep, answer_upload, idempotent_responses
from api.http.path_ids import ModelIdPath
from api.schemas.benchmarks import BenchmarkHistory
from api.schemas.common import ErrorBody, PageParams
from api.schemas.models import ModelList, ModelRead
from api.schemas.uploads import UPLOAD_BODY
from api.services import benchmark_history, deletions, models
from api.services.idempotency import Answer
from api.services.uploads import resumable
from api.services.uploads.freshness import refresh_interval
from core.db.models import BenchmarkSuite, BenchmarkVariant, Model

router = APIRouter(prefix="/v1/models", tags=["models"],
                   dependencies=[Depends(get_current_project)])


@router.post(
    "",
    response_model=ModelRead,
    status_code=201,
    responses=idempotent_responses({
        201: "The model, checked and stored",
        200: "The same bytes were uploaded before; that model is returned"}),
    openapi_extra=UPLOAD_BODY,
)
async def upload_model(
    idempotent: IdempotentRequestDep,  # before the upload: a bad key is refused unread
    received: ReceivedModelUploadDep,
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    checker: ModelCheckerDep,
    project: CurrentProject,
    upload_id: Annotated[uuid.UUID | None, Query()] = None,
) -> Response:
    """Upload an ONNX model: `curl -F file=@model.onnx .../v1/models` (or a raw octet-stream body).

    A large file can go up in pieces instead, resumed after a lost connection (tus 1.0 at
    /v1/uploads); `?upload_id=` then makes the model of the finished upload, without a body.

    A model over FUSEFORGE_MODEL_LIMITS__* (control-flow depth, rank, a declared dim, a name's
    length), with an opset or op domain the installed runtimes cannot load, or with names that
    are not storable text is refused with 422, and nothing is kept.
    """

    def upload() -> Answer:
        model, created = models.register_upload(
            session=session, store=store, received=received,
            limits=settings.model_limits.to_limits(), checker=checker, project_id=project,
            scratch=settings.uploads_dir,
            fresh_every_s=refresh_interval(settings.janitor.upload_stale_s))
        if upload_id is not None:  # its pieces are the model's object now: they can go
            resumable.made_into_model(session, store, upload_id, model.sha256)
        return Answer(201 if created else 200,
                      ModelRead.model_validate(model).model_dump_json().encode())

    return await answer_upload(session=session, request=idempotent, received=received,
                               settings=settings.idempotency, produce=upload)


@router.get("", response_model=ModelList)
def list_models(session: SessionDep, project: CurrentProject,
                page: Annotated[PageParams, Query()]) -> ModelList:
    rows, total = models.list_models(session=session, project_id=project, limit=page.limit,
                                     offset=page.offset)
    counts = models.job_counts(session=session, model_ids=[m.id for m in rows])
    return ModelList(
        items=[_counted(m, counts.get(m.id, 0)) for m in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{model_id}", response_model=ModelRead)
def read_model(model_id: ModelIdPath, session: SessionDep, project: CurrentProject) -> ModelRead:
    model = models.get_model(session=session, project_id=project, model_id=model_id)
    return _counted(model, models.job_counts(session=session, model_ids=[model.id]).get(model.id, 0))


@router.get("/{model_id}/benchmarks", response_model=BenchmarkHistory,
            responses={404: {"model": ErrorBody, "description": "No such model"}})
def read_benchmark_history(
    model_id: ModelIdPath, session: SessionDep, project: CurrentProject,
    page: Annotated[PageParams, Query()],
    variant: Annotated[str, Query(max_length=64, description="whose records: \"engine\", "
                                  "\"original\", or an ablation stage")] = BenchmarkVariant.ENGINE,
    suite: Annotated[str, Query(max_length=16, description="\"comparison\" (original vs "
                                "engine) or \"ablation\"")] = BenchmarkSuite.COMPARISON,
) -> BenchmarkHistory:
    """The model's benchmark records over time, grouped by configuration (`config_key`: the
    settings of what the job shipped that make two records the same measurement; `config`
    describes what shipped), the most recently measured first.
    Each entry is one job's record with its confidence intervals, the speed-up's verdict, where
    it was measured (and how that differs from the configuration's latest entry) and whether it
    was flagged as a regression. Paging counts configurations."""
    return benchmark_history.benchmark_history(
        session=session, project_id=project, model_id=model_id, variant=variant, suite=suite,
        limit=page.limit, offset=page.offset)


def _counted(model: Model, job_count: int) -> ModelRead:
    return ModelRead.model_validate(model).model_copy(update={"job_count": job_count})


@router.delete(
    "/{model_id}",
    status_code=204,
    response_class=Response,
    responses={204: {"description": "The model, its jobs and their files are gone"},
               404: {"model": ErrorBody, "description": "No such model"},
               409: {"model": ErrorBody,
                     "description": "Some of its jobs are queued or running (named)"}},
)
def delete_model(model_id: ModelIdPath, session: SessionDep, store: StoreDep,
                 cache: JobCacheDep, project: CurrentProject) -> None:
    """Delete the model with all its jobs, their artifacts, validation and benchmark records,
    events and webhook deliveries, and the uploaded file. Refused with 409, naming them, while
    any of its jobs is queued or running: cancel them or let them end first."""
    job_ids = deletions.delete_model(session=session, store=store, project_id=project,
                                     model_id=model_id)
    cache.forget_jobs(project, job_ids)
