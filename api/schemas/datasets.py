"""Bodies of /v1/datasets."""

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import examples
from api.schemas.common import Page
from core.db.models import DatasetRole

__all__ = ["DatasetArray", "DatasetList", "DatasetRead"]


class DatasetArray(BaseModel):
    name: str  # the model input it feeds
    dtype: str
    shape: list[int] = Field(description="one sample: the array's shape without the sample axis")
    # None for datasets uploaded before ranges were recorded
    min: float | None = Field(default=None, description="the least value over all samples")
    max: float | None = Field(default=None, description="the greatest value over all samples")


class DatasetRead(BaseModel):
    """An uploaded .npz: S samples, each one model call with every input at its sample shape."""

    model_config = ConfigDict(from_attributes=True,
                              json_schema_extra={"examples": [examples.DATASET]})

    id: uuid.UUID
    name: str
    sha256: str
    size_bytes: int
    samples: int = Field(description="length of the leading sample axis shared by every array")
    arrays: list[DatasetArray]
    role: DatasetRole = Field(description="`calibration`: an INT8 job's activation ranges are "
                              "computed on it; `validation`: a job's accuracy is checked on it")
    has_labels: bool = Field(description="a 1-D integer `labels` array: the class of each sample")
    created_at: datetime


class DatasetList(Page[DatasetRead]):
    model_config = ConfigDict(
        json_schema_extra={"examples": [examples.page([examples.DATASET])]})
