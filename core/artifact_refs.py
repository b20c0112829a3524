"""What every artifact store shares: `store://<key>` URIs, the keys they accept, what a put and a
listing return, and the error a store that cannot be reached raises."""

from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote

__all__ = ["URI_PREFIX", "ArtifactStoreUnavailable", "CopyCancelled", "ListedObject", "StoredObject",
           "attachment_disposition", "checked_key", "key_of"]

URI_PREFIX = "store://"


class ArtifactStoreUnavailable(RuntimeError):
    """The store did not answer, or refused a request it should take; the message names it."""


class CopyCancelled(Exception):
    """A `copy_in` stopped because its caller no longer wants it; nothing was stored."""


@dataclass(frozen=True)
class StoredObject:
    uri: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class ListedObject:
    """One object of a folder listing: its URI, and when it was stored (epoch seconds)."""

    uri: str
    name: str  # the last part of its key
    modified_at: float


def checked_key(key: str) -> PurePosixPath:
    """`key` as a relative path; every store refuses the same keys."""
    relative = PurePosixPath(key)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ValueError(f"artifact key {key!r} must be a relative path without '..'")
    return relative


def key_of(uri: str) -> str:
    """The key a `store://` URI names."""
    if not uri.startswith(URI_PREFIX):
        raise ValueError(f"artifact URI {uri!r} does not start with {URI_PREFIX!r}")
    return uri.removeprefix(URI_PREFIX)


def attachment_disposition(filename: str) -> str:
    """A Content-Disposition that saves the download as `filename` (RFC 6266; non-ASCII names
    as filename*, as Starlette's FileResponse writes them)."""
    quoted = quote(filename, safe="")
    if quoted == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=utf-8''{quoted}"
