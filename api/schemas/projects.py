"""Bodies of /v1/project: the caller's project and its default webhook."""

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas import examples
from core.job_config import checked_callback_url

__all__ = ["ProjectRead", "ProjectUpdate"]

_DEFAULT_CALLBACK_URL = (
    "the callback URL of the project's jobs submitted without a `callback_url` field (a job's "
    'own wins; `"callback_url": null` on a job sends none); null: no default')


class ProjectRead(BaseModel):
    """The project of the request's API key."""

    model_config = ConfigDict(from_attributes=True,
                              json_schema_extra={"examples": [examples.PROJECT]})

    id: uuid.UUID
    name: str
    created_at: datetime
    default_callback_url: str | None = Field(description=_DEFAULT_CALLBACK_URL)


class ProjectUpdate(BaseModel):
    """What PATCH /v1/project changes: the fields sent (a field left out stays as it is)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"default_callback_url": examples.CALLBACK_URL},
        {"default_callback_url": None},
    ]})

    default_callback_url: str | None = Field(
        default=None,
        description=_DEFAULT_CALLBACK_URL + ". http(s), a host that resolves to public addresses "
        "only (checked now, and again on every delivery); null clears it, leaving the field out "
        "keeps it")

    @field_validator("default_callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        return checked_callback_url(value)
