"""Bodies of /v1/models."""

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas import examples
from api.schemas.common import Page

__all__ = ["DataFileRead", "ExternalDataRead", "ModelList", "ModelRead", "TensorInfo"]


class TensorInfo(BaseModel):
    name: str
    dtype: str
    shape: list[int | str | None]  # a dynamic dimension is its symbolic name, or null


class DataFileRead(BaseModel):
    location: str  # as the model's tensors name it, relative to the .onnx file's folder
    size: int
    sha256: str
    tensors: int  # how many tensors read from it


class ExternalDataRead(BaseModel):
    """What an upload of a model with its data files (a tar archive) held."""

    model_file: str  # the .onnx file's path inside the archive
    files: list[DataFileRead]
    tensor_bytes: int  # what the tensors read, in all
    file_bytes: int


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
    # what the upload check found valid but suspect, e.g. weights holding NaN or infinity
    warnings: list[str] = Field(default_factory=list)
    # uploaded as a tar of the .onnx file and its data files: what it held (sha256 is then
    # the hash of the set: its files' paths, sizes and hashes); null: a single .onnx file
    external_data: ExternalDataRead | None = None
    created_at: datetime
    # GET /v1/models and /v1/models/{id}: how many jobs the model has (any status); null in an
    # upload's answer, which does not count them
    job_count: int | None = None

    @field_validator("warnings", mode="before")
    @classmethod
    def _none_is_no_warning(cls, value: list[str] | None) -> list[str]:
        return value or []  # rows stored before the column existed, or with nothing to say


class ModelList(Page[ModelRead]):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.page([examples.MODEL])]})
