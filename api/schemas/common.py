"""Shapes shared by several resources: errors and pages."""

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

__all__ = ["ErrorBody", "Page", "PageParams"]


class ErrorBody(BaseModel):
    error: str  # the error class, e.g. "JobNotFound"
    detail: str  # what was wrong and what would work


class PageParams(BaseModel):
    limit: int = Field(default=50, ge=1, le=500)
    # Bounded: past a 64-bit integer the databases' drivers fail (a 500); a billion rows is
    # far beyond any listing.
    offset: int = Field(default=0, ge=0, le=10**9)


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int
