"""/v1/models: upload, list and read ONNX models."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import SessionDep, SettingsDep, StoreDep
from api.schemas.common import PageParams
from api.schemas.models import ModelList, ModelRead
from api.services import models
from api.services.uploads import receive_upload

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.post(
    "",
    response_model=ModelRead,
    status_code=201,
    responses={200: {"description": "The same bytes were uploaded before; that model is returned"}},
)
async def upload_model(
    request: Request,
    response: Response,
    session: SessionDep,
    store: StoreDep,
    settings: SettingsDep,
    name: Annotated[str | None, Query(max_length=255)] = None,
) -> ModelRead:
    """Upload an ONNX model: `curl -F file=@model.onnx .../v1/models` (or a raw octet-stream body)."""
    length = request.headers.get("content-length")
    received = await receive_upload(
        chunks=request.stream(),
        content_type=request.headers.get("content-type", ""),
        content_length=int(length) if length and length.isdigit() else None,
        temp_dir=settings.data_dir / "uploads",
        max_bytes=settings.max_upload_bytes,
        raw_name=name,
    )
    model, created = await run_in_threadpool(
        models.register_upload, session=session, store=store, received=received
    )
    response.status_code = 201 if created else 200
    return ModelRead.model_validate(model)


@router.get("", response_model=ModelList)
def list_models(session: SessionDep, page: Annotated[PageParams, Query()]) -> ModelList:
    rows, total = models.list_models(session=session, limit=page.limit, offset=page.offset)
    return ModelList(
        items=[ModelRead.model_validate(m) for m in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get("/{model_id}", response_model=ModelRead)
def read_model(model_id: uuid.UUID, session: SessionDep) -> ModelRead:
    return ModelRead.model_validate(models.get_model(session=session, model_id=model_id))
