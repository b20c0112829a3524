"""Errors services raise; api/main.py renders each as {"error": <class name>, "detail": ...}."""

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ArtifactNotFound",
    "BrokerUnavailable",
    "DatabaseUnavailable",
    "DatasetNotFound",
    "InvalidDatasetFile",
    "InvalidJobConfig",
    "InvalidModelFile",
    "InvalidProjectSettings",
    "InsufficientStorage",
    "InvalidUpload",
    "JobNotCancellable",
    "JobNotFound",
    "MalformedRequest",
    "ModelNotFound",
    "ProjectNotFound",
    "RequestBodyTimeout",
    "ServiceError",
    "Unauthorized",
    "UploadTooLarge",
]


class ServiceError(Exception):
    status_code = 400
    headers: ClassVar[Mapping[str, str]] = {}  # sent with the response, e.g. Retry-After

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        if status_code is not None:
            self.status_code = status_code


class Unauthorized(ServiceError):
    """No API key, or one that is unknown, revoked or expired: one message for all, so a
    client learns nothing about keys it does not hold."""

    status_code = 401
    headers: ClassVar[Mapping[str, str]] = {"WWW-Authenticate": "Bearer"}


class ModelNotFound(ServiceError):
    status_code = 404


class DatasetNotFound(ServiceError):
    status_code = 404


class JobNotFound(ServiceError):
    status_code = 404


class ArtifactNotFound(ServiceError):
    status_code = 404


class ProjectNotFound(ServiceError):
    status_code = 404


class JobNotCancellable(ServiceError):
    status_code = 409


class InvalidJobConfig(ServiceError):
    status_code = 422


class InvalidModelFile(ServiceError):
    status_code = 422


class InvalidProjectSettings(ServiceError):
    status_code = 422


class InvalidDatasetFile(ServiceError):
    status_code = 422


class InvalidUpload(ServiceError):
    status_code = 422


class MalformedRequest(ServiceError):
    """The HTTP request itself is broken (its framing, its size fields, its encoding), as opposed
    to a well-formed request with unusable contents (422)."""

    status_code = 400


class RequestBodyTimeout(ServiceError):
    """The request body stalled or trickled (api/body_deadline.py); the connection is closed,
    since the rest of the body will not be read."""

    status_code = 408
    headers: ClassVar[Mapping[str, str]] = {"Connection": "close"}


class InsufficientStorage(ServiceError):
    """The server has no room to keep what the client sent (a full disk, a quota)."""

    status_code = 507


class UploadTooLarge(ServiceError):
    status_code = 413


class BrokerUnavailable(ServiceError):
    status_code = 503


class DatabaseUnavailable(ServiceError):
    """The database cannot be reached or has no connection to give; retrying later may work."""

    status_code = 503
    retry_after_s = 5
    headers: ClassVar[Mapping[str, str]] = {"Retry-After": str(retry_after_s)}
