"""Artifact storage: content-hashed files addressed by `store://<key>` URIs.

`LocalArtifactStore` keeps them under a folder (the embedded default and the compose volume). Other
stores (S3, GCS) implement the same `ArtifactStore` protocol and pass the same contract tests.
"""

import hashlib
import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO, Protocol

from core.artifact_refs import URI_PREFIX, StoredObject, checked_key, key_of
from core.settings import Settings

__all__ = ["ArtifactStore", "LocalArtifactStore", "StoredObject", "artifact_store"]

_CHUNK = 1024 * 1024


class ArtifactStore(Protocol):
    def put_file(self, source: Path, key: str) -> StoredObject:
        """Copy `source` in under `key` atomically and return its URI, hash and size."""
        ...

    def move_in(self, source: Path, key: str) -> str:
        """Move `source` (already hashed by the caller) in under `key`; return its URI."""
        ...

    def open(self, uri: str) -> BinaryIO: ...

    def uri_for(self, key: str) -> str:
        """The URI `put_file(..., key)` gives (to look up an object stored under a known key)."""
        ...

    def local_path(self, uri: str) -> Path:
        """A readable local path for `uri` (downloaded first by remote stores)."""
        ...

    def exists(self, uri: str) -> bool: ...

    def delete(self, uri: str) -> None:
        """Remove `uri`; a missing object is not an error (deletes are retried after failures)."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object whose key starts with `prefix` (a folder: "jobs/<id>/")."""
        ...


class LocalArtifactStore:
    """Files under `root`; writes go to a temporary name first, then an atomic rename."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path_for_key(self, key: str) -> Path:
        return self.root.joinpath(*checked_key(key).parts)

    def _path_for_uri(self, uri: str) -> Path:
        return self._path_for_key(key_of(uri))

    def put_file(self, source: Path, key: str) -> StoredObject:
        target = self._path_for_key(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
        digest = hashlib.sha256()
        size = 0
        try:
            with source.open("rb") as src, partial.open("wb") as dst:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    dst.write(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return StoredObject(uri=URI_PREFIX + key, sha256=digest.hexdigest(), size_bytes=size)

    def move_in(self, source: Path, key: str) -> str:
        target = self._path_for_key(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(source, target)
        except OSError:  # another filesystem: copy, then rename into place
            partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
            shutil.copyfile(source, partial)
            os.replace(partial, target)
            source.unlink()
        return URI_PREFIX + key

    def open(self, uri: str) -> BinaryIO:
        return self._path_for_uri(uri).open("rb")

    def uri_for(self, key: str) -> str:
        self._path_for_key(key)  # the same refusals as put_file
        return URI_PREFIX + key

    def local_path(self, uri: str) -> Path:
        return self._path_for_uri(uri)

    def exists(self, uri: str) -> bool:
        return self._path_for_uri(uri).is_file()

    def delete(self, uri: str) -> None:
        self._path_for_uri(uri).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"artifact prefix {prefix!r} must name a folder (end with '/')")
        shutil.rmtree(self._path_for_key(prefix.rstrip("/")), ignore_errors=True)


def artifact_store(settings: Settings) -> ArtifactStore:
    """The store `settings` configure: the local folder `settings.artifacts_dir`, or an S3
    bucket (FUSEFORGE_STORAGE__BACKEND=s3; boto3 is imported only then)."""
    if settings.storage.backend == "s3":
        from core.object_store import S3ArtifactStore

        return S3ArtifactStore.from_settings(settings.storage.s3, settings.object_cache_dir)
    return LocalArtifactStore(settings.artifacts_dir)
