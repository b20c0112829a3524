"""Every error the FuseForge client raises, as one tree under `FuseForgeError`.

    FuseForgeError                   status_code, error, detail (None where no answer came)
    ├── ConnectionFailedError        the server could not be reached (after the retries)
    ├── ApiError                     the server answered with an error status and {error, detail}
    │   ├── InvalidRequestError      400, 408, 413, 422 and other 4xx: fix the request (a job's
    │   │                            config, an upload); distinct from a job's *validation*
    │   ├── AuthenticationError      401, 403: a missing, wrong or revoked API key
    │   ├── NotFoundError            404: no such model, dataset, job or artifact
    │   ├── ConflictError            409: e.g. cancelling a job that has finished
    │   │   └── IdempotencyConflictError  a POST's Idempotency-Key: an earlier try is still
    │   │                            running on the server, or the request changed between tries
    │   ├── RateLimitedError         429 (after the retries)
    │   └── ServerError              5xx
    │       └── ServiceUnavailableError   502, 503, 504 (after the retries)
    ├── DownloadError                an artifact's bytes do not match the sha256 the server gave
    └── JobError                     a job ended (or was waited on) without succeeding; `.job`
        ├── JobFailedError           status "failed"; error/detail are the job's error
        │   └── ValidationFailedError    the engine's outputs were outside the tolerances
        ├── JobCancelledError        status "cancelled"
        └── JobTimeoutError          still running when `wait`'s timeout passed

`ApiError.error` and `.detail` are the server's JSON fields as sent (e.g. "JobNotFound", "job
... does not exist; GET /v1/jobs lists jobs"), so a message never loses the server's advice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fuseforge_client.resources import Job

__all__ = [
    "ApiError",
    "AuthenticationError",
    "ConflictError",
    "ConnectionFailedError",
    "DownloadError",
    "FuseForgeError",
    "IDEMPOTENCY_CONFLICTS",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobTimeoutError",
    "NotFoundError",
    "RateLimitedError",
    "ServerError",
    "ServiceUnavailableError",
    "ValidationFailedError",
    "api_error",
]


class FuseForgeError(Exception):
    """Base of the client's errors. `status_code` is the HTTP status (None when the server did
    not answer, or for a job's outcome); `error` a short name; `detail` what happened and what
    to do."""

    def __init__(self, detail: str, *, error: str | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.error = error or type(self).__name__
        self.status_code = status_code


class ConnectionFailedError(FuseForgeError):
    """No answer: connection refused, DNS failure, timeout, connection dropped."""


class DownloadError(FuseForgeError):
    """A downloaded artifact is not what the server described (size or sha256)."""


class ApiError(FuseForgeError):
    """The server answered `status_code` with its `{error, detail}` body."""

    def __init__(self, detail: str, *, error: str | None = None, status_code: int,
                 method: str = "", path: str = "") -> None:
        super().__init__(detail, error=error, status_code=status_code)
        self.method = method
        self.path = path

    def __str__(self) -> str:
        where = f" on {self.method} {self.path}" if self.path else ""
        return f"{self.error} ({self.status_code}{where}): {self.detail}"


class InvalidRequestError(ApiError):
    """The request cannot be served as sent (400, 408, 413, 422...): the detail names the field
    or the problem with the upload."""


class AuthenticationError(ApiError):
    """401 or 403: set a valid API key (FUSEFORGE_API_KEY or `api_key=`)."""


class NotFoundError(ApiError):
    """404."""


class ConflictError(ApiError):
    """409: the resource is in a state that does not allow this (e.g. cancel a finished job)."""


# The server's names of a conflict on a request's Idempotency-Key.
IDEMPOTENCY_CONFLICTS = frozenset({"IdempotencyKeyInProgress", "IdempotencyKeyReused"})


class IdempotencyConflictError(ConflictError):
    """409 on a POST's Idempotency-Key (`idempotency_key`, one per client call). `error` says
    which: "IdempotencyKeyInProgress", an earlier try of the same call is still running on the
    server (it outlasted the retries; it may yet succeed, so look before sending it again), or
    "IdempotencyKeyReused", the request changed between tries (e.g. the file being uploaded was
    rewritten)."""

    def __init__(self, detail: str, *, error: str | None = None, status_code: int = 409,
                 method: str = "", path: str = "", idempotency_key: str) -> None:
        super().__init__(detail, error=error, status_code=status_code, method=method, path=path)
        self.idempotency_key = idempotency_key


class RateLimitedError(ApiError):
    """429, still, after the retries."""


class ServerError(ApiError):
    """5xx: a fault on the server's side; its detail quotes a reference for its log."""


class ServiceUnavailableError(ServerError):
    """502, 503 or 504, still, after the retries: the service or what it needs is down."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError, 409: ConflictError,
    429: RateLimitedError, 502: ServiceUnavailableError, 503: ServiceUnavailableError,
    504: ServiceUnavailableError,
}


def api_error(status_code: int, error: str | None, detail: str, *, method: str = "",
              path: str = "") -> ApiError:
    """The ApiError subclass for `status_code`, carrying the server's `error` and `detail`."""
    cls = _BY_STATUS.get(status_code)
    if cls is None:
        cls = ServerError if status_code >= 500 else InvalidRequestError
    return cls(detail, error=error, status_code=status_code, method=method, path=path)


class JobError(FuseForgeError):
    """A job that did not succeed; `job` is the job as last read."""

    def __init__(self, detail: str, *, job: Job, error: str | None = None) -> None:
        super().__init__(detail, error=error)
        self.job = job


class JobFailedError(JobError):
    """The job failed: `error` is its error code (e.g. "UnsupportedModelError"), `detail` its
    message."""


class ValidationFailedError(JobFailedError):
    """The job failed because the engine's outputs differ from the original's beyond the
    tolerances (`job.validation` has the per-output figures)."""


class JobCancelledError(JobError):
    """The job was cancelled before it finished."""


class JobTimeoutError(JobError):
    """`wait` gave up while the job was still queued or running (the job goes on)."""
