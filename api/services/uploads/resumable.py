"""Model uploads sent in pieces, resumed after a lost connection or an API restart: the tus
1.0 protocol's core, creation, termination and checksum extensions (https://tus.io/protocols/
resumable-upload).

POST /v1/uploads creates one for `Upload-Length` bytes; each PATCH sends the next piece at
`Upload-Offset` (optionally with `Upload-Checksum: sha256 <base64>`), streamed into an object of
the artifact store of its own, `uploads/<id>/<offset>`; HEAD says how far it got. A piece
counts once its object is committed and the row's offset moved past it, in that order: a
piece cut off by a dying API or a lost connection leaves the offset where it was, and the
client sends it again from there. Nothing of a piece is kept in the API's memory or on its
disk, and every API host sees the same pieces, so a client resumes on whichever host answers.
A whole upload becomes a model through the usual check (POST /v1/models?upload_id=), its
pieces read back in order as if they were the request's body; then its pieces go, and its row
remembers the model until it expires, so a repeat of that request (a lost answer) finds the
model again. One left unfinished past `resumable.expiry_s` since its last piece is removed by
the janitor.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import BinaryIO

from sqlalchemy import select, update
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.services.errors import (
    InvalidUpload,
    MalformedRequest,
    UploadChecksumMismatch,
    UploadNotFinished,
    UploadNotFound,
    UploadOffsetMismatch,
    UploadTooLarge,
)
from api.services.uploads.form import refuse_control_characters
from core.db.models import ResumableUpload
from core.db.resumable_uploads import piece_folder, piece_key
from core.db.types import utc_now
from core.settings import Settings
from core.storage import ArtifactStore

__all__ = ["PIECE_TYPE", "TUS_EXTENSIONS", "TUS_VERSION", "append_piece", "create_upload", "find_upload",
           "made_into_model", "stored_bytes", "terminate_upload"]

TUS_VERSION = "1.0.0"
TUS_EXTENSIONS = "creation,termination,checksum"
PIECE_TYPE = "application/offset+octet-stream"  # a PATCH's Content-Type
_READ_BYTES = 1024 * 1024


def create_upload(session: Session, *, project_id: uuid.UUID, length: str | None,
                  metadata: str | None, settings: Settings) -> ResumableUpload:
    """A new upload of the project for `length` bytes (the Upload-Length header), named by
    Upload-Metadata's `filename`.

    Raises:
        MalformedRequest: no or a malformed Upload-Length or Upload-Metadata.
        UploadTooLarge: longer than FUSEFORGE_MAX_UPLOAD_BYTES.
    """
    size = _byte_count(length, "Upload-Length")
    if size > settings.max_upload_bytes:
        raise UploadTooLarge(f"the upload is {size} bytes; the limit is "
                             f"{settings.max_upload_bytes} bytes (FUSEFORGE_MAX_UPLOAD_BYTES)")
    filename = _metadata(metadata).get("filename")
    upload = ResumableUpload(project_id=project_id, length=size, offset=0, pieces=0,
                             filename=filename[:255] if filename else None,
                             expires_at=utc_now() + timedelta(seconds=settings.resumable.expiry_s))
    session.add(upload)
    session.commit()
    return upload


def find_upload(session: Session, project_id: uuid.UUID, upload_id: uuid.UUID, *,
                finished: bool = False) -> ResumableUpload:
    """The project's upload; UploadNotFound for an unknown, expired or another's alike.
    `finished`: it must hold all its bytes (UploadNotFinished otherwise)."""
    upload = session.scalars(select(ResumableUpload).where(
        ResumableUpload.id == upload_id, ResumableUpload.project_id == project_id)).one_or_none()
    if upload is None or upload.expires_at <= utc_now():
        raise UploadNotFound(f"upload {upload_id} does not exist (or expired and was removed); "
                             "create a new one with POST /v1/uploads")
    if finished and upload.offset != upload.length:
        raise UploadNotFinished(
            f"upload {upload_id} holds {upload.offset} of its {upload.length} bytes; send the "
            "rest (PATCH from its offset) before making a model of it")
    return upload


async def append_piece(*, session: Session, store: ArtifactStore, project_id: uuid.UUID,
                       upload_id: uuid.UUID, offset: str | None, content_length: int | None,
                       checksum: str | None, content_type: str | None,
                       chunks: AsyncIterator[bytes], settings: Settings) -> int:
    """Store the request body as the piece at `offset` (the Upload-Offset header); the
    upload's new offset.

    Raises:
        UploadNotFound: as `find_upload` (before any header is read: another project's
            upload is not found, whatever the request).
        InvalidUpload: (415) a Content-Type other than application/offset+octet-stream.
        MalformedRequest: a malformed header, or a body shorter than its Content-Length.
        UploadOffsetMismatch: `offset` is not where the upload is (another PATCH moved it).
        UploadTooLarge: the piece runs past Upload-Length, or over resumable.max_piece_bytes.
        UploadChecksumMismatch: the piece's bytes do not match its Upload-Checksum.
        ArtifactStoreUnavailable: the store did not answer; nothing of the piece counts.
    """
    upload = await run_in_threadpool(find_upload, session, project_id, upload_id)
    if (content_type or "").split(";")[0].strip() != PIECE_TYPE:
        raise InvalidUpload(f"a piece is sent as {PIECE_TYPE}, not {content_type!r}",
                            status_code=415)
    at = _byte_count(offset, "Upload-Offset")
    expected = _checksum(checksum)
    if at != upload.offset:
        raise UploadOffsetMismatch(f"Upload-Offset {at} is not where upload {upload_id} is: "
                                   f"it holds {upload.offset} bytes; HEAD it and send from there")
    room = min(upload.length - at, settings.resumable.max_piece_bytes)
    if content_length is not None and content_length > room:
        raise UploadTooLarge(_past(upload, at, content_length, settings))
    session.rollback()  # no transaction is held while the piece arrives
    writer = store.open_writer(piece_key(upload_id, at))
    digest, size = hashlib.sha256(), 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > room:
                raise UploadTooLarge(_past(upload, at, size, settings))
            writer.write(chunk)
            digest.update(chunk)
            if (waiting := writer.room()) is not None:
                await asyncio.wrap_future(waiting)
        if content_length is not None and size != content_length:
            raise MalformedRequest(f"the piece ended after {size} of the {content_length} "
                                   "bytes its Content-Length announced")
        if expected is not None and digest.digest() != expected:
            raise UploadChecksumMismatch(
                f"the piece at offset {at} does not match its Upload-Checksum (sha256 of the "
                f"{size} bytes received: {base64.b64encode(digest.digest()).decode()}); "
                "send it again")
        await run_in_threadpool(writer.commit)
    except BaseException:
        writer.abort()
        raise
    return await run_in_threadpool(_moved, session, upload, at, size, settings)


def _moved(session: Session, upload: ResumableUpload, at: int, size: int,
           settings: Settings) -> int:
    """Move the upload's offset past the piece just stored, unless another PATCH did first."""
    moved = session.execute(
        update(ResumableUpload)
        .where(ResumableUpload.id == upload.id, ResumableUpload.offset == at)
        .values(offset=at + size, pieces=ResumableUpload.pieces + 1,
                expires_at=utc_now() + timedelta(seconds=settings.resumable.expiry_s)))
    session.commit()
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        raise UploadOffsetMismatch(f"another request sent the piece at offset {at} of upload "
                                   f"{upload.id} first; HEAD it and send from its offset")
    return at + size


def made_into_model(session: Session, store: ArtifactStore, upload_id: uuid.UUID,
                    sha256: str) -> None:
    """Record that the upload is now the model of `sha256`, and drop its pieces."""
    session.execute(update(ResumableUpload).where(ResumableUpload.id == upload_id)
                    .values(model_sha256=sha256))
    session.commit()
    store.delete_prefix(piece_folder(upload_id) + "/")


def terminate_upload(session: Session, store: ArtifactStore, upload: ResumableUpload) -> None:
    """Remove the upload's row, then its pieces (a piece left by a failed delete has no row
    and goes with the janitor's expiry round)."""
    session.delete(upload)
    session.commit()
    store.delete_prefix(piece_folder(upload.id) + "/")


async def stored_bytes(store: ArtifactStore, upload: ResumableUpload) -> AsyncIterator[bytes]:
    """The bytes of a finished upload (`find_upload(..., finished=True)`), its pieces read
    back in order: each piece starts where the one before ended, so a piece a dead request
    left past the offset is never read."""
    at = 0
    while at < upload.length:
        handle = await run_in_threadpool(store.open, store.uri_for(piece_key(upload.id, at)))
        try:
            for chunk in _read(handle):
                yield chunk
                at += len(chunk)
        finally:
            handle.close()


def _read(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(_READ_BYTES):
        yield chunk


def _past(upload: ResumableUpload, at: int, size: int, settings: Settings) -> str:
    return (f"a piece of {size} bytes at offset {at} runs past upload {upload.id}'s "
            f"Upload-Length of {upload.length} bytes, or over the "
            f"{settings.resumable.max_piece_bytes} bytes one PATCH may carry "
            "(FUSEFORGE_RESUMABLE__MAX_PIECE_BYTES)")


def _byte_count(text: str | None, header: str) -> int:
    if text is None or not text.isascii() or not text.isdigit():
        raise MalformedRequest(f"the {header} header {text!r} is not a byte count"
                               if text is not None else f"the request has no {header} header")
    return int(text)


def _checksum(header: str | None) -> bytes | None:
    """The sha256 digest an Upload-Checksum header gives (`sha256 <base64>`); None: no header.

    Raises:
        MalformedRequest: another algorithm, or a value that is not a base64 sha256 digest.
    """
    if header is None:
        return None
    algorithm, _, value = header.strip().partition(" ")
    if algorithm.lower() != "sha256":
        raise MalformedRequest(f"Upload-Checksum algorithm {algorithm[:20]!r} is not supported; "
                               "send sha256 (Tus-Checksum-Algorithm)")
    try:
        digest = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != hashlib.sha256().digest_size:
        raise MalformedRequest("Upload-Checksum's value is not the base64 of a sha256 digest")
    return digest


def _metadata(header: str | None) -> dict[str, str]:
    """Upload-Metadata's pairs (`key base64value`, comma separated), decoded as UTF-8."""
    pairs: dict[str, str] = {}
    for item in (header or "").split(","):
        if not item.strip():
            continue
        key, _, value = item.strip().partition(" ")
        try:
            text = base64.b64decode(value, validate=True).decode("utf-8") if value else ""
        except (binascii.Error, ValueError) as err:
            raise MalformedRequest(f"Upload-Metadata's value for {key[:40]!r} is not base64 of "
                                   "UTF-8 text") from err
        pairs[key] = refuse_control_characters(text, f"Upload-Metadata's {key[:40]!r}")
    return pairs
