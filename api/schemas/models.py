"""Bodies of /v1/models."""

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from api.schemas import examples
from api.schemas.common import Page

__all__ = ["ModelList", "ModelRead", "TensorInfo"]


class TensorInfo(BaseModel):
    name: str
    dtype: str
    shape: list[int | str | None]  # a dynamic dimension is its symbolic name, or null


class ModelRead(BaseModel):
    model_config = ConfigDict(from_attributes=True,
                              json_schema_extra={"examples": [examples.MODEL]})

    id: uuid.UUID
    name: str
    sha256: str
    size_bytes: int
    ir_version: int
    opset: int
    producer: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    created_at: datetime
    # GET /v1/models and /v1/models/{id}: how many jobs the model has (any status); null in an
    # upload's answer, which does not count them
    job_count: int | None = None


class ModelList(Page[ModelRead]):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.page([examples.MODEL])]})
