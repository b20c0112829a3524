"""Errors services raise; api/main.py renders each as {"error": <class name>, "detail": ...}."""

import uuid
from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ArtifactExpired",
    "ArtifactNotFound",
    "ArtifactStoreDown",
    "BrokerUnavailable",
    "CsrfRejected",
    "DatabaseUnavailable",
    "DatasetInUse",
    "DatasetNotFound",
    "DatasetRoleConflict",
    "IdempotencyKeyInProgress",
    "IdempotencyKeyReused",
    "InvalidDatasetFile",
    "InvalidIdempotencyKey",
    "InvalidJobConfig",
    "InvalidModelFile",
    "InvalidProjectSettings",
    "InsufficientStorage",
    "InvalidUpload",
    "JobNotCancellable",
    "JobNotDeletable",
    "JobNotFound",
    "MalformedRequest",
    "ModelInUse",
    "ModelNotFound",
    "QuotaExceeded",
    "ProjectNotFound",
    "RequestBodyTimeout",
    "ServiceError",
    "Unauthorized",
    "UploadChecksumMismatch",
    "UploadNotFinished",
    "UploadNotFound",
    "UploadOffsetMismatch",
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


class CsrfRejected(ServiceError):
    """A request signed in by the dashboard's session cookie that may change something, without
    the page's CSRF token (a cross-site form, or a script that did not send X-CSRF-Token)."""

    status_code = 403


class ModelNotFound(ServiceError):
    status_code = 404


class DatasetNotFound(ServiceError):
    status_code = 404


class JobNotFound(ServiceError):
    status_code = 404

    @classmethod
    def for_job(cls, job_id: uuid.UUID) -> "JobNotFound":
        """The refusal for a job id the project has no job of, with where to find its jobs."""
        return cls(f"job {job_id} does not exist; GET /v1/jobs lists jobs")


class ArtifactNotFound(ServiceError):
    status_code = 404


class ArtifactExpired(ServiceError):
    """The artifact's file was removed under the retention policy; its row is kept."""

    status_code = 410


class ProjectNotFound(ServiceError):
    status_code = 404


class JobNotCancellable(ServiceError):
    status_code = 409


class InvalidIdempotencyKey(ServiceError):
    status_code = 422


class IdempotencyKeyReused(ServiceError):
    """The Idempotency-Key came with another body than the request that first used it."""

    status_code = 409


class JobNotDeletable(ServiceError):
    """A queued or running job: it must be cancelled (or end) before it can be deleted."""

    status_code = 409


class IdempotencyKeyInProgress(ServiceError):
    """The request that first used the Idempotency-Key has not answered yet."""

    status_code = 409
    retry_after_s = 2
    headers: ClassVar[Mapping[str, str]] = {"Retry-After": str(retry_after_s)}


class ModelInUse(ServiceError):
    """A model with queued or running jobs cannot be deleted."""

    status_code = 409


class DatasetInUse(ServiceError):
    """A dataset queued or running jobs validate on cannot be deleted."""

    status_code = 409


class DatasetRoleConflict(ServiceError):
    """The same bytes uploaded again with another role: one set of samples cannot both calibrate
    a model and judge it."""

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
    """The request body stalled or trickled (api/http/body_deadline.py); the connection is closed,
    since the rest of the body will not be read."""

    status_code = 408
    headers: ClassVar[Mapping[str, str]] = {"Connection": "close"}


class InsufficientStorage(ServiceError):
    """The server has no room to keep what the client sent (a full disk, a quota)."""

    status_code = 507


class UploadTooLarge(ServiceError):
    status_code = 413


class UploadNotFound(ServiceError):
    status_code = 404


class UploadOffsetMismatch(ServiceError):
    """A PATCH whose Upload-Offset is not where the upload is (tus: 409)."""

    status_code = 409


class UploadNotFinished(ServiceError):
    status_code = 409


class UploadChecksumMismatch(ServiceError):
    """A piece whose Upload-Checksum does not match its bytes (tus's checksum extension: 460)."""

    status_code = 460


class QuotaExceeded(ServiceError):
    """The upload would take the project past its storage quota (FUSEFORGE_QUOTA__*): a limit
    of the client's, so 413 (a client error, not retried) rather than the server's 507."""

    status_code = 413


class BrokerUnavailable(ServiceError):
    status_code = 503


class ArtifactStoreDown(ServiceError):
    """The artifact store (an S3 bucket) cannot be reached; retrying later may work."""

    status_code = 503
    retry_after_s = 5
    headers: ClassVar[Mapping[str, str]] = {"Retry-After": str(retry_after_s)}


class DatabaseUnavailable(ServiceError):
    """The database cannot be reached or has no connection to give; retrying later may work."""

    status_code = 503
    retry_after_s = 5
    headers: ClassVar[Mapping[str, str]] = {"Retry-After": str(retry_after_s)}
