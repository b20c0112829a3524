"""What every artifact store shares: `store://<key>` URIs, the keys they accept, and what a put
returns."""

from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["URI_PREFIX", "StoredObject", "checked_key", "key_of"]

URI_PREFIX = "store://"


@dataclass(frozen=True)
class StoredObject:
    uri: str
    sha256: str
    size_bytes: int


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
