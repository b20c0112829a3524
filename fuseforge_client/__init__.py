"""The FuseForge Python client: `FuseForgeClient` (client.py, needs httpx), its error tree
(errors.py), and `verify_signature` for webhook receivers (webhooks.py, standard library only).

The client is imported when first named (`from fuseforge_client import FuseForgeClient`), so
the parts that need only the standard library import without httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuseforge_client.errors import (
    ApiError,
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    DownloadError,
    FuseForgeError,
    IdempotencyConflictError,
    InvalidRequestError,
    JobCancelledError,
    JobError,
    JobFailedError,
    JobTimeoutError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    ValidationFailedError,
)
from fuseforge_client.resources import (
    Artifact,
    Dataset,
    Job,
    JobOutcome,
    JobPage,
    Model,
    Shipped,
    SpeedupVerdict,
)
from fuseforge_client.webhooks import SignatureError, verify_signature

if TYPE_CHECKING:
    from fuseforge_client.client import FuseForgeClient
    from fuseforge_client.retry import RetryPolicy

__all__ = [
    "ApiError",
    "Artifact",
    "AuthenticationError",
    "ConflictError",
    "ConnectionFailedError",
    "Dataset",
    "DownloadError",
    "FuseForgeClient",
    "FuseForgeError",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "Job",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobOutcome",
    "JobPage",
    "JobTimeoutError",
    "Model",
    "NotFoundError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailableError",
    "Shipped",
    "SignatureError",
    "SpeedupVerdict",
    "ValidationFailedError",
    "verify_signature",
]

_NEEDS_HTTPX = {"FuseForgeClient": "fuseforge_client.client", "RetryPolicy": "fuseforge_client.retry"}


def __getattr__(name: str) -> Any:
    if name in _NEEDS_HTTPX:
        import importlib

        return getattr(importlib.import_module(_NEEDS_HTTPX[name]), name)
    raise AttributeError(f"module 'fuseforge_client' has no attribute {name!r}")
