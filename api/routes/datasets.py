"""/v1/datasets: upload, list, read and delete .npz datasets that jobs calibrate or validate
on."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from api.deps import (
    CurrentProject,
    JobCacheDep,
    ReceivedUploadDep,
    SessionDep,
    SettingsDep,
    StoreDep,
    get_current_project,
)
from api.http.idempotent_posts import IdempotentRequestDep, answer_upload, idempotent_responses
from api.http.path_ids import DatasetIdPath
from api.schemas.common import ErrorBody, PageParams
from api.schemas.datasets import DatasetList, DatasetRead
from api.schemas.uploads import UPLOAD_BODY
from api.services import datasets, deletions
from api.services.errors import InvalidUpload
from api.services.idempotency import Answer
from core.db.models import DatasetRole

router = APIRouter(prefix="/v1/datasets", tags=["datasets"],
                   dependencies=[Depends(get_current_project)])

_ROLES = [role.value for role in DatasetRole]
_ROLE_HELP = ("what the samples are for: `calibration` (an INT8 job's activation ranges) or "
              "`validation` (the accuracy check); one set of samples has one role")


def upload_role(role: Annotated[str, Query(description=_ROLE_HELP,
                                           json_schema_extra={"enum": _ROLES})]
                = DatasetRole.VALIDATION.value) -> DatasetRole:
    """The upload's `role`, checked before the body is read: a dependency that fails with a
    validation error would let FastAPI go on to receive (and strand) the upload."""
    try:
        return DatasetRole(role)
    except ValueError:
        raise InvalidUpload(
            f"role: {role[:32]!r} is not a dataset role; choose one of "
            f"{', '.join(map(repr, _ROLES))}") from None


UploadRoleDep = Annotated[DatasetRole, Depends(upload_role)]


@router.post(
    "",
    response_model=DatasetRead,
    status_code=201,
    responses=idempotent_responses({
        201: "The dataset, checked and stored",
        200: "The same bytes were uploaded before; that one is returned"}),
    openapi_extra=UPLOAD_BODY,
)
async def upload_dataset(
    idempotent: IdempotentRequestDep,  # before the upload: a bad key is refused unread
    role: UploadRoleDep,  # before the upload too
    received: ReceivedUploadDep,
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    project: CurrentProject,
) -> Response:
    """Upload an .npz: `curl -F file=@data.npz .../v1/datasets` (or a raw octet-stream body);
    `?role=calibration` for the samples an INT8 job calibrates on (default `validation`).

    One array per model input, named after it, each with a leading sample axis of the same
    length S, and optionally `labels` (S integer class indices). Sample i of every array is one
    model call, so the model's batch dim is part of each sample: for an input of shape
    [N, 3, 224, 224], an array of shape [S, 1, 3, 224, 224] is S calls at batch size 1. Jobs
    name the dataset by id (`"dataset_id"`), which checks it against their model's inputs.
    Each array's least and greatest value is recorded (`arrays[].min`, `max`); an array holding
    NaN or an infinity is refused (422). The same bytes uploaded again with the other role are
    refused (409): the samples that calibrate a model must not be the ones that judge it.
    """

    def upload() -> Answer:
        dataset, created = datasets.register_upload(
            session=session, store=store, received=received, project_id=project, role=role)
        return Answer(201 if created else 200,
                      DatasetRead.model_validate(dataset).model_dump_json().encode())

    return await answer_upload(session=session, request=idempotent, received=received,
                               settings=settings.idempotency, produce=upload,
                               query={"role": str(role)})


@router.get("", response_model=DatasetList)
def list_datasets(session: SessionDep, project: CurrentProject,
                  page: Annotated[PageParams, Query()],
                  role: Annotated[DatasetRole | None,
                                  Query(description="only the datasets of this role")] = None,
                  ) -> DatasetList:
    rows, total = datasets.list_datasets(session=session, project_id=project, limit=page.limit,
                                         offset=page.offset, role=role)
    return DatasetList(
        items=[DatasetRead.model_validate(d) for d in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{dataset_id}", response_model=DatasetRead)
def read_dataset(dataset_id: DatasetIdPath, session: SessionDep,
                 project: CurrentProject) -> DatasetRead:
    return DatasetRead.model_validate(
        datasets.get_dataset(session=session, project_id=project, dataset_id=dataset_id))


@router.delete(
    "/{dataset_id}",
    status_code=204,
    response_class=Response,
    responses={204: {"description": "The dataset and its file are gone"},
               404: {"model": ErrorBody, "description": "No such dataset"},
               409: {"model": ErrorBody,
                     "description": "Queued or running jobs validate on it (named)"}},
)
def delete_dataset(dataset_id: DatasetIdPath, session: SessionDep, store: StoreDep,
                   cache: JobCacheDep, project: CurrentProject) -> None:
    """Delete the dataset and its file. Refused with 409, naming them, while a queued or
    running job validates on it. Finished jobs that used it keep their results; their
    `config.dataset_id` still names it."""
    deletions.delete_dataset(session=session, store=store, project_id=project,
                             dataset_id=dataset_id)
    cache.forget_changing()
