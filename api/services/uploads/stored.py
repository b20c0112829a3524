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
    key: str,
    describe: Callable[[Path], Row],
) -> tuple[Row, bool]:
    """The project's `kind` row for these bytes and whether it is new: (row, created).

    Bytes the project uploaded before return its existing row unchecked (another project's
    copy is never returned: its rows are invisible here). The stored file is shared by content
    address. Otherwise `describe(path)` checks the file and builds the row (raising a
    ServiceError when the file is unusable) while the file is copied into `store` under `key`,
    and the row commits with that URI. The temporary file is always consumed, and a failed check
    or commit leaves no stored file behind.
    """
    try:
        existing = session.scalars(select(kind).where(
            kind.project_id == project_id, kind.sha256 == received.sha256)).first()
        if existing is not None:
            return existing, False
        # No transaction spans the check (seconds, for a large model): on SQLite it would hold
        # the write lock every other upload, job and heartbeat waits for.
        session.rollback()
        row = _checked_while_copied(session, store, received.path, key, kind, describe)
        row.project_id = project_id
    finally:
        received.path.unlink(missing_ok=True)

    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        # The same bytes were uploaded concurrently and won the race; the stored file is
        # identical (same content address), so keep it and return the winner's row.
        session.rollback()
        return session.scalars(select(kind).where(
            kind.project_id == project_id, kind.sha256 == received.sha256)).one(), False
    except BaseException:
        session.rollback()
        _delete_unless_named(session, store, kind, row.storage_uri)
        raise
    return row, True


def _checked_while_copied(session: Session, store: ArtifactStore, path: Path, key: str,
                          kind: type[Row], describe: Callable[[Path], Row]) -> Row:
    """`describe(path)`, while the file is copied into `store`: behind the check (seconds, for
    a large model) an object store's upload costs no time of its own. A failed check cancels
    the copy, or deletes what it stored."""
    cancelled = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload-copy") as pool:
        copying = pool.submit(store.copy_in, path, key, cancelled=cancelled)
        try:
            row = describe(path)
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
