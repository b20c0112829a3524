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
from concurrent.futures import Future
from contextlib import suppress
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
           "LocalArtifactStore", "ObjectWriter", "StoredObject", "artifact_store"]

_CHUNK = 1024 * 1024
_PARTIAL_SUFFIX = ".partial"


class ObjectWriter(Protocol):
    """An object written into a store as its bytes arrive, shown to no reader until `commit`
    (an upload streamed in while it is received: no local copy of the whole file)."""

    key: str
    describe: str  # where the bytes go, for messages: "artifact folder /data/artifacts/models"

    def write(self, data: bytes) -> None:
        """Append `data`. Blocks while the store is behind (a caller that awaits `room` first
        never blocks). Raises ArtifactStoreUnavailable, or the OSError of a full disk."""
        ...

    def room(self) -> Future[None] | None:
        """For callers on an event loop: a future to wait for before the next `write` while
        the store is behind (its error is the store's); None when a write can go ahead."""
        ...

    def keep_fresh(self) -> None:
        """Mark the write as alive, once every byte is written (the janitor drops a write no
        byte reached for a while: an upload whose API died). No `write` may follow."""
        ...

    def commit(self) -> str:
        """Show the object under `key`, whole and at once; its URI. Blocks until stored."""
        ...

    def abort(self) -> None:
        """Drop what was written, leaving no object (removed in the background where that
        takes a request; the janitor's `remove_abandoned_writes` catches what a crash left).
        Does nothing once committed."""
        ...


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

    def open_writer(self, key: str) -> ObjectWriter:
        """A writer that stores what it is fed under `key` once committed (see ObjectWriter)."""
        ...

    def remove_abandoned_writes(self, folder: str, older_than: float) -> list[str]:
        """Drop the writes into `folder` nobody committed or aborted (their process died) whose
        last bytes came before `older_than` (epoch seconds); the keys they were for."""
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
        partial = _partial_beside(target)
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
        partial = _partial_beside(target)
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

    def open_writer(self, key: str) -> ObjectWriter:
        return LocalObjectWriter(self._path_for_key(key), key)

    def remove_abandoned_writes(self, folder: str, older_than: float) -> list[str]:
        removed = []
        for path in self._entries(folder):
            if not _is_partial(path.name):
                continue
            try:
                if path.stat().st_mtime < older_than:
                    path.unlink()
                    removed.append(f"{folder.rstrip('/')}/{_key_name_of_partial(path.name)}")
            except FileNotFoundError:
                continue  # committed or aborted meanwhile
        return removed

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
            if _is_partial(path.name):
                continue  # not an object yet: a store shows none before its write commits
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


class LocalObjectWriter:
    """Writes a hidden partial file beside `target`; `commit` syncs it and renames it in."""

    def __init__(self, target: Path, key: str) -> None:
        self.key = key
        self.describe = f"artifact folder {target.parent}"
        target.parent.mkdir(parents=True, exist_ok=True)
        self._target = target
        self._partial = _partial_beside(target)
        self._handle: BinaryIO | None = self._partial.open("wb")
        self._committed = False
        self._finished = False  # keep_fresh was called: no more bytes

    def write(self, data: bytes) -> None:
        if self._handle is None:
            raise ValueError(f"the write of {self.key!r} is over: it was committed or aborted")
        if self._finished:
            raise ValueError(f"the write of {self.key!r} was marked complete by keep_fresh")
        self._handle.write(data)

    def room(self) -> Future[None] | None:
        return None  # a local write never waits for anyone

    def keep_fresh(self) -> None:
        self._finished = True
        os.utime(self._partial)  # the janitor goes by its modification time

    def commit(self) -> str:
        if self._handle is None:
            raise ValueError(f"the write of {self.key!r} is over: it was committed or aborted")
        handle, self._handle = self._handle, None
        try:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(self._partial, self._target)
        except BaseException:
            with suppress(OSError):
                handle.close()
            self._partial.unlink(missing_ok=True)
            raise
        self._committed = True
        return URI_PREFIX + self.key

    def abort(self) -> None:
        if self._handle is not None:
            with suppress(OSError):  # its buffered bytes no longer matter
                self._handle.close()
            self._handle = None
        if not self._committed:
            self._partial.unlink(missing_ok=True)


def _partial_beside(target: Path) -> Path:
    """A hidden name beside `target` to write it under before the rename that shows it."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex}{_PARTIAL_SUFFIX}")


def _is_partial(name: str) -> bool:
    return name.startswith(".") and name.endswith(_PARTIAL_SUFFIX)


def _key_name_of_partial(name: str) -> str:
    """The object name a partial file is written for (".m.onnx.<hex>.partial" -> "m.onnx")."""
    return name[1:].removesuffix(_PARTIAL_SUFFIX).rsplit(".", 1)[0]


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
