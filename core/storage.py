"""Artifact storage: content-hashed files addressed by `store://<key>` URIs.

`LocalArtifactStore` keeps them under a folder (the embedded default, one host).
`S3ArtifactStore` (core/object_store.py) keeps them in a bucket, for services on several hosts.
Both pass the same contract tests (tests/core/test_artifact_stores.py).
"""

import hashlib
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import BinaryIO, Protocol

from core.artifact_refs import (
    URI_PREFIX,
    ArtifactStoreUnavailable,
    CopyCancelled,
    ListedObject,
    StoredObject,
    checked_key,
    key_of,
)
from core.settings import Settings

__all__ = ["ArtifactStore", "ArtifactStoreUnavailable", "CopyCancelled", "ListedObject",
           "LocalArtifactStore", "StoredObject", "artifact_store"]

_CHUNK = 1024 * 1024


class ArtifactStore(Protocol):
    describe: str  # which store, for messages: "artifact folder /data/artifacts", "bucket ..."

    def put_file(self, source: Path, key: str) -> StoredObject:
        """Copy `source` in under `key` atomically and return its URI, hash and size."""
        ...

    def copy_in(self, source: Path, key: str, *, cancelled: threading.Event | None = None
                ) -> str:
        """Store `source` (already hashed by the caller, who keeps it) under `key` atomically;
        its URI. Raises CopyCancelled, having stored nothing, once `cancelled` is set (an
        upload whose check failed while its copy went on)."""
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

    def list_folder(self, folder: str) -> list[ListedObject]:
        """The objects directly in `folder` ("models"), not those in its subfolders."""
        ...

    def list_subfolders(self, folder: str) -> list[str]:
        """The names of the folders directly in `folder` ("jobs" -> job ids)."""
        ...

    def download_url(self, uri: str, *, filename: str, media_type: str) -> str | None:
        """A URL a client can fetch `uri` from without the API (saved as `filename`), or None
        where the API must send the bytes itself."""
        ...

    def check(self) -> None:
        """Raise ArtifactStoreUnavailable, naming the store, unless it can be used now."""
        ...

    def ensure_ready(self) -> bool:
        """Create what the store needs (its folder, its bucket); True if it made anything."""
        ...


class LocalArtifactStore:
    """Files under `root`; writes go to a temporary name first, then an atomic rename."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.describe = f"artifact folder {self.root}"

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

    def copy_in(self, source: Path, key: str, *, cancelled: threading.Event | None = None
                ) -> str:
        target = self._path_for_key(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
        try:
            if not _hard_linked(source, partial):  # another filesystem: copy the bytes
                with source.open("rb") as src, partial.open("wb") as dst:
                    while chunk := src.read(_CHUNK):
                        if cancelled is not None and cancelled.is_set():
                            raise CopyCancelled(f"the copy of {source.name} into {key!r} was "
                                                "cancelled")
                        dst.write(chunk)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
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

    def list_folder(self, folder: str) -> list[ListedObject]:
        listed = []
        for path in self._entries(folder):
            try:
                if path.is_file():
                    listed.append(ListedObject(uri=f"{URI_PREFIX}{folder.rstrip('/')}/{path.name}",
                                               name=path.name, modified_at=path.stat().st_mtime))
            except FileNotFoundError:
                continue  # removed while listed
        return listed

    def list_subfolders(self, folder: str) -> list[str]:
        return [path.name for path in self._entries(folder) if path.is_dir()]

    def download_url(self, uri: str, *, filename: str, media_type: str) -> str | None:
        return None  # the API serves the file itself

    def check(self) -> None:
        existing = self.root  # the first put makes the folder: its nearest parent must be writable
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
            raise ArtifactStoreUnavailable(f"The {self.describe} cannot be written by this "
                                           f"process ({existing} is not a writable folder)")

    def ensure_ready(self) -> bool:
        made = not self.root.is_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        return made

    def _entries(self, folder: str) -> list[Path]:
        directory = self._path_for_key(folder.rstrip("/"))
        try:
            return list(directory.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []


def _hard_linked(source: Path, link: Path) -> bool:
    """Link `source` as `link` (the same filesystem: no bytes move); False where it cannot."""
    try:
        os.link(source, link)
    except OSError:
        return False
    return True


_stores: dict[str, ArtifactStore] = {}
_stores_lock = threading.Lock()


def artifact_store(settings: Settings) -> ArtifactStore:
    """The store `settings` configure: the local folder `settings.artifacts_dir`, or an S3
    bucket (FUSEFORGE_STORAGE__BACKEND=s3; boto3 is imported only then). S3 stores are made
    once per configuration: a boto3 client is slow to build and safe to share between threads."""
    if settings.storage.backend != "s3":
        return LocalArtifactStore(settings.artifacts_dir)
    from core.object_store import S3ArtifactStore

    s3 = settings.storage.s3
    secret = s3.secret_access_key.get_secret_value() if s3.secret_access_key else ""
    key = f"{s3.model_dump_json()}|{secret}|{settings.object_cache_dir.resolve()}"
    with _stores_lock:
        if key not in _stores:
            _stores[key] = S3ArtifactStore.from_settings(s3, settings.object_cache_dir)
        return _stores[key]
