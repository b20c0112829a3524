"""Keep a received upload once per project and content hash, with the row that describes it."""

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.services.uploads.freshness import kept_fresh
from api.services.uploads.receive import ReceivedFile, shown_name
from core.db.models import Dataset, Model
from core.storage import ArtifactStore

__all__ = ["display_name", "store_upload"]

Row = TypeVar("Row", Model, Dataset)


def display_name(received: ReceivedFile, default: str) -> str:
    """The `name` field, else the file's own name, else `default`; at most 255 characters."""
    return shown_name(received.filename, received.name, default)


def store_upload(
    *,
    session: Session,
    store: ArtifactStore,
    received: ReceivedFile,
    project_id: uuid.UUID,
    kind: type[Row],
    describe: Callable[[], Row],
    key: str | None = None,
    fresh_every_s: float = 1.0,
) -> tuple[Row, bool]:
    """The project's `kind` row for these bytes and whether it is new: (row, created).

    Bytes the project uploaded before return its existing row unchecked. Otherwise
    `describe()` checks the upload and builds the row (raising a ServiceError when it is
    unusable); then the bytes are kept (an object written while they arrived is committed; a
    temporary file is copied in under `key` while it is checked), and the row commits with
    that URI. What was received is always consumed, and a failed check or commit leaves no
    stored object behind. An object being written is kept fresh every `fresh_every_s` while it
    is checked (api/services/uploads/freshness.py).
    """
    try:
        existing = _project_row(session, kind, project_id, received.sha256)
        if existing is not None:
            return existing, False
        # No transaction spans the check (seconds, for a large model): on SQLite it would hold
        # the write lock every other upload, job and heartbeat waits for.
        session.rollback()
        if received.written is not None:
            with kept_fresh(received.written.keep_fresh, fresh_every_s):
                row = describe()
            row.storage_uri = received.written.commit()  # ArtifactStoreUnavailable: a 503
        elif received.path is not None and key is not None:
            row = _checked_while_copied(session, store, received.path, key, kind, describe)
        else:
            raise ValueError("a received file needs the key to store it under")
        row.project_id = project_id
    finally:
        received.discard()

    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        # The same bytes were uploaded concurrently and won the race: return the winner's
        # row, and drop this upload's object (the winner's own, for a content-addressed key).
        session.rollback()
        _delete_unless_named(session, store, kind, row.storage_uri)
        return session.scalars(select(kind).where(
            kind.project_id == project_id, kind.sha256 == received.sha256)).one(), False
    except BaseException:
        session.rollback()
        _delete_unless_named(session, store, kind, row.storage_uri)
        raise
    return row, True


def _project_row(session: Session, kind: type[Row], project_id: uuid.UUID,
                 sha256: str) -> Row | None:
    return session.scalars(select(kind).where(
        kind.project_id == project_id, kind.sha256 == sha256)).first()


def _checked_while_copied(session: Session, store: ArtifactStore, path: Path, key: str,
                          kind: type[Row], describe: Callable[[], Row]) -> Row:
    """`describe()`, while the file at `path` is copied into `store`: behind the check an
    object store's upload costs no time of its own. A failed check cancels the copy, or
    deletes what it stored."""
    cancelled = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload-copy") as pool:
        copying = pool.submit(store.copy_in, path, key, cancelled=cancelled)
        try:
            row = describe()
        except BaseException:
            cancelled.set()
            wait([copying])
            if copying.exception() is None:  # it finished first
                _delete_unless_named(session, store, kind, copying.result())
            raise
        row.storage_uri = copying.result()  # ArtifactStoreUnavailable: a 503, no row
    return row


def _delete_unless_named(session: Session, store: ArtifactStore, kind: type[Row],
                         uri: str) -> None:
    # The object is shared by content address: another project's row may name it.
    if session.scalars(select(kind.id).where(kind.storage_uri == uri)).first() is None:
        store.delete(uri)
