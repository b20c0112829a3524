"""Ids in URL paths. A malformed id names no object, so it answers like an unknown one: 404 with
the resource's NotFound error, not 422 from path validation. Each `...IdPath` is a dependency
a route takes in place of `uuid.UUID`. They are `async` on purpose: FastAPI would run a sync
one on a worker thread, a hop that costs more than the parsing."""

import uuid
from typing import Annotated

from fastapi import Depends, Path

from api.services.errors import (
    ArtifactNotFound,
    DatasetNotFound,
    JobNotFound,
    ModelNotFound,
    ServiceError,
)

__all__ = ["ArtifactNamePath", "DatasetIdPath", "JobIdPath", "ModelIdPath"]

_SHOWN_CHARS = 64  # an id is echoed in the message, cut to this length


def _parse(raw: str, error: type[ServiceError], noun: str, listing: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError as err:
        raise error(f"{noun} {_shown(raw)} does not exist: ids are UUIDs such as "
                    f"'{uuid.UUID(int=0)}'; GET {listing} lists the {noun}s") from err


def _shown(raw: str) -> str:
    return repr(raw[:_SHOWN_CHARS]) + ("..." if len(raw) > _SHOWN_CHARS else "")


async def _model_id(model_id: Annotated[str, Path(description="the model's id, a UUID")]) -> uuid.UUID:
    return _parse(model_id, ModelNotFound, "model", "/v1/models")


async def _dataset_id(
    dataset_id: Annotated[str, Path(description="the dataset's id, a UUID")],
) -> uuid.UUID:
    return _parse(dataset_id, DatasetNotFound, "dataset", "/v1/datasets")


async def _job_id(job_id: Annotated[str, Path(description="the job's id, a UUID")]) -> uuid.UUID:
    return _parse(job_id, JobNotFound, "job", "/v1/jobs")


async def _artifact_name(name: Annotated[str, Path(description="the artifact's file name")]) -> str:
    # No artifact is named with a control character, and PostgreSQL refuses NUL in a query.
    if any(ord(char) < 0x20 or char == "\x7f" for char in name):
        raise ArtifactNotFound(f"no artifact is named {_shown(name)}: artifact names are plain "
                               "file names such as 'engine.onnx'; GET /v1/jobs/{id} lists a "
                               "job's artifacts")
    return name


ModelIdPath = Annotated[uuid.UUID, Depends(_model_id)]
DatasetIdPath = Annotated[uuid.UUID, Depends(_dataset_id)]
JobIdPath = Annotated[uuid.UUID, Depends(_job_id)]
ArtifactNamePath = Annotated[str, Depends(_artifact_name)]
