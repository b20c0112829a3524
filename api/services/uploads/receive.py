"""Receive an uploaded file by streaming it, hashed, into the artifact store (a model: as an
object shown once its check passes) or a temporary file (a dataset).

A model upload is an .onnx file, or a tar of one with its external data files
(optimizer/model/archive.py), read apart as it arrives. Memory stays flat whatever the file
size (an object store that falls behind slows the reading
of the body down), and the size limit and the project's storage quota are
enforced while bytes arrive, so an oversized upload is cut off early instead of being written
out first. Accepts multipart/form-data (field `file`, optional field `name`; see
upload_form.py) or a raw `application/octet-stream` body. The body must be as long as its
Content-Length says.
"""

import asyncio
import errno
import hashlib
import os
import posixpath
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import (
    DEFAULT_MAX_HEADER_SIZE,
    MultipartParser,
    parse_options_header,
)

from api.services.errors import (
    InsufficientStorage,
    InvalidUpload,
    MalformedRequest,
    UploadTooLarge,
)
from api.services.uploads.form import FormReader, refuse_control_characters
from api.services.uploads.quota import UploadRoom
from core.disk_space import NO_ROOM_ERRNOS
from core.storage import ObjectWriter
from optimizer.errors import InvalidModelError
from optimizer.model.archive import ARCHIVE_BLOCK, ArchiveReader, ModelArchive, is_tar_header
from optimizer.model.skeleton import ModelSkeleton, SkeletonBuilder

__all__ = ["ModelReceipt", "ReceivedFile", "receive_upload", "shown_name"]

_FRAMING_ALLOWANCE_BYTES = 64 * 1024  # multipart boundaries and part headers around the file
# A full disk, a full quota, and a file-size limit (RLIMIT_FSIZE or the filesystem's own).
_HEADER_TOO_LONG = "Maximum header size exceeded"  # python-multipart's words for it


@dataclass(frozen=True)
class ModelReceipt:
    """A model upload as it was read: its skeleton's builder, and, for an archive, what the
    archive held (`archive`) or why it is refused (`refusal`)."""

    builder: SkeletonBuilder
    archive: ModelArchive | None = None
    refusal: InvalidModelError | None = None


@dataclass(frozen=True)
class ReceivedFile:
    filename: str | None
    name: str | None  # the optional `name` form field
    sha256: str
    size_bytes: int
    # Where the bytes are, one of two: a temporary file (`path`), or an object written into
    # the artifact store but not yet shown (`written`), which the caller commits or aborts.
    path: Path | None = None
    written: ObjectWriter | None = None
    # A model upload's skeleton, built as it arrived (optimizer/model/skeleton.py), and for
    # an archive of a model with its data files, what it held; their framing errors are
    # raised by `skeleton()`, the check's first step. (An archive's `sha256` is its set's.)
    model: ModelReceipt | None = None

    @property
    def archive(self) -> ModelArchive | None:
        return self.model.archive if self.model is not None else None

    def skeleton(self) -> ModelSkeleton:
        if self.model is None:
            raise ValueError("this upload was not received as a model")
        if self.model.refusal is not None:
            raise self.model.refusal
        return self.model.builder.finish()

    def discard(self) -> None:
        """Drop the received bytes unless they were kept (a refused upload, a replay)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        if self.written is not None:
            self.written.abort()  # nothing once committed


def shown_name(filename: str | None, name: str | None, default: str) -> str:
    """What an upload is called: the `name` field, else the file's own name, else `default`;
    at most 255 characters."""
    if name:
        return name[:255]
    if filename:
        return Path(filename).name[:255] or default
    return default


def _too_large(max_bytes: int, size: int | None = None) -> UploadTooLarge:
    found = f"the upload is {size} bytes" if size is not None else "the upload exceeds the limit"
    return UploadTooLarge(f"{found}; the limit is {max_bytes} bytes (FUSEFORGE_MAX_UPLOAD_BYTES)")


@contextmanager
def _no_room_is_507(where: str, written: int) -> Iterator[None]:
    """Turn the OSErrors of a full disk into InsufficientStorage naming what was written."""
    try:
        yield
    except OSError as err:
        if err.errno not in NO_ROOM_ERRNOS:
            raise
        raise InsufficientStorage(
            f"the server has no room to store the upload: writing {where} failed after "
            f"{written} bytes ({errno.errorcode[err.errno]}: {os.strerror(err.errno)}); retry "
            "later, once the operator has freed space in FUSEFORGE_DATA_DIR") from err


class _TempFile:
    """A temporary file under `folder`, written as an ObjectWriter is (a dataset upload's
    describe step reads a file: api/services/datasets.py)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"upload-{uuid.uuid4().hex}.part"
        self.describe = f"upload folder {folder}"
        with _no_room_is_507(self.describe, 0):
            folder.mkdir(parents=True, exist_ok=True)
            self._handle: BinaryIO = self.path.open("wb")

    def write(self, data: bytes) -> None:
        self._handle.write(data)

    def room(self) -> Future[None] | None:
        return None

    def keep_fresh(self) -> None:
        os.utime(self.path)  # the janitor goes by its modification time

    def close(self) -> None:
        self._handle.close()  # its buffered bytes are written now

    def abort(self) -> None:
        with suppress(OSError):  # its own write errors no longer matter
            self._handle.close()
        self.path.unlink(missing_ok=True)


def _opened(open_writer: Callable[[], ObjectWriter]) -> ObjectWriter:
    with _no_room_is_507("the artifact store", 0):  # a local store makes its folder
        return open_writer()


class _Sink:
    """Hashes what it writes to `out`, refusing to grow past `max_bytes` or the room `quota`
    left; a full disk is InsufficientStorage."""

    def __init__(self, out: ObjectWriter | _TempFile, max_bytes: int,
                 quota: UploadRoom | None = None,
                 also: Callable[[bytes], None] | None = None) -> None:
        self.out = out
        self.max_bytes = max_bytes
        self.quota = quota
        self.also = also  # fed every byte written, in order
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        if self.size + len(data) > self.max_bytes:
            raise _too_large(self.max_bytes)
        if self.quota is not None and self.size + len(data) > self.quota.bytes_left:
            raise self.quota.refusal()
        with _no_room_is_507(self.out.describe, self.size):
            self.out.write(data)
        self.size += len(data)
        self.digest.update(data)
        if self.also is not None:
            self.also(data)

    async def wait_for_room(self) -> None:
        """Wait while the store is behind (an object store's parts still being sent)."""
        if (room := self.out.room()) is not None:
            await asyncio.wrap_future(room)

    def close(self) -> None:
        if isinstance(self.out, _TempFile):
            with _no_room_is_507(self.out.describe, self.size):
                self.out.close()


async def _checked_body(
    chunks: AsyncIterator[bytes], content_length: int | None, max_bytes: int
) -> AsyncIterator[bytes]:
    """`chunks`, held to the declared Content-Length and to the upload limit plus framing."""
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if content_length is not None and received > content_length:
            raise MalformedRequest(
                f"the request body is longer than its Content-Length of {content_length} bytes")
        if received > max_bytes + _FRAMING_ALLOWANCE_BYTES:
            raise _too_large(max_bytes)
        yield chunk
    if content_length is not None and received < content_length:
        raise MalformedRequest(
            f"the request body ended after {received} of the {content_length} bytes its "
            "Content-Length announced")


async def receive_upload(
    *,
    chunks: AsyncIterator[bytes],
    content_type: str,
    content_length: int | None,
    temp_dir: Path,
    max_bytes: int,
    raw_name: str | None = None,
    quota: UploadRoom | None = None,
    model: bool = False,
    into: Callable[[], ObjectWriter] | None = None,
) -> ReceivedFile:
    """Stream the request body into the writer `into` opens (an object of the artifact store,
    left for the caller to commit) or else a temporary file under `temp_dir`; drop it on any
    error.
    `quota`: the room the project's storage quota leaves (None: no quota). `model`: also build
    the model's skeleton from the bytes as they arrive, for the check.

    Raises:
        MalformedRequest: a body that does not match its Content-Length, or a multipart body
            without a boundary, with broken framing or over the form's limits (upload_form.py).
        InvalidUpload: a well-formed body with unusable contents; 415 for another media type.
        UploadTooLarge: over `max_bytes`, said as soon as it is certain.
        QuotaExceeded: over the room `quota` leaves, likewise.
        InsufficientStorage: the disk (or quota, or file-size limit) written to is full.
        ArtifactStoreUnavailable: `into`'s store stopped answering.
    """
    if content_length is not None and content_length > max_bytes + _FRAMING_ALLOWANCE_BYTES:
        raise _too_large(max_bytes, content_length)  # refuse early only what is certainly too large
    if (quota is not None and content_length is not None
            and content_length > quota.bytes_left + _FRAMING_ALLOWANCE_BYTES):
        raise quota.refusal()
    if raw_name is not None:
        refuse_control_characters(raw_name, "query parameter 'name'")
    media_type, params = parse_options_header(content_type)
    if media_type not in (b"multipart/form-data", b"application/octet-stream"):
        raise InvalidUpload(
            f"unsupported Content-Type {content_type or '(none)'!r}: send multipart/form-data "
            "with a 'file' field (curl -F file=@model.onnx) or application/octet-stream",
            status_code=415,
        )
    if media_type == b"multipart/form-data" and not params.get(b"boundary"):
        raise MalformedRequest(
            "the multipart/form-data Content-Type has no boundary parameter; let the client "
            "library build the header (curl -F file=@model.onnx)")
    body = _checked_body(chunks, content_length, max_bytes)
    feed = _ModelFeed() if model else None
    out = _opened(into) if into is not None else _TempFile(temp_dir)
    sink = _Sink(out, max_bytes, quota, also=feed.write if feed else None)
    try:
        if media_type == b"multipart/form-data":
            filename, name = await _read_multipart(body, params[b"boundary"], sink, feed)
        else:
            if feed is not None:
                feed.name_now = lambda: (None, raw_name)
            async for chunk in body:
                sink.write(chunk)
                await sink.wait_for_room()
            filename, name = None, raw_name
        sink.close()
        receipt = feed.finish(filename, name) if feed else None
        archive = receipt.archive if receipt else None
        return ReceivedFile(filename, name,
                            archive.set_sha256 if archive else sink.digest.hexdigest(),
                            sink.size,
                            path=out.path if isinstance(out, _TempFile) else None,
                            written=None if isinstance(out, _TempFile) else out,
                            model=receipt)
    except BaseException:
        out.abort()
        raise


class _ModelFeed:
    """Feeds a model upload's bytes to a SkeletonBuilder: straight, for an .onnx file, or
    through an ArchiveReader, for a tar of a model and its data files (optimizer/model/
    archive.py), told apart by the first block. The builder is named as the upload is named
    when its first byte comes (its messages name the file as the user knows it); an
    archive's refusal is kept, as a skeleton's framing errors are, for the check to raise."""

    def __init__(self) -> None:
        self.name_now: Callable[[], tuple[str | None, str | None]] = lambda: (None, None)
        self._head = bytearray()  # the first block, until it says which the upload is
        self._target: Callable[[bytes], None] | None = None
        self._builder: SkeletonBuilder | None = None
        self._reader: ArchiveReader | None = None
        self._error: InvalidModelError | None = None

    def write(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._target is None:
            self._head += data
            if len(self._head) < ARCHIVE_BLOCK:
                return
            data, self._head = bytes(self._head), bytearray()
            self._target = self._start(data)
        try:
            self._target(data)
        except InvalidModelError as err:
            self._error = err

    def finish(self, filename: str | None, name: str | None) -> ModelReceipt:
        """What the upload was: its skeleton's builder, and its archive's listing."""
        if self._target is None:  # fewer bytes than a block: not an archive
            head, self._head = bytes(self._head), bytearray()
            self._target = self._start(head, (filename, name))
            if head:
                self._target(head)
        archive = None
        if self._reader is not None and self._error is None:
            try:
                archive = self._reader.finish()
            except InvalidModelError as err:
                self._error = err
        if self._builder is None:  # an archive without a model, or refused before it
            self._builder = SkeletonBuilder(shown_name(filename, name, "model.onnx"))
        return ModelReceipt(self._builder, archive, self._error)

    def _start(self, head: bytes, names: tuple[str | None, str | None] | None = None
               ) -> Callable[[bytes], None]:
        filename, name = names or self.name_now()
        if is_tar_header(head):
            self._reader = ArchiveReader(shown_name(filename, name, "model.tar"),
                                         self._model_bytes)
            return self._reader.feed
        self._builder = SkeletonBuilder(shown_name(filename, name, "model.onnx"))
        return self._builder.feed

    def _model_bytes(self, member: str, data: bytes) -> None:
        if self._builder is None:
            self._builder = SkeletonBuilder(posixpath.basename(member))
        self._builder.feed(data)


async def _read_multipart(
    chunks: AsyncIterator[bytes], boundary: bytes, sink: _Sink,
    feed: _ModelFeed | None = None,
) -> tuple[str | None, str | None]:
    reader = FormReader(sink.write)
    if feed is not None:
        feed.name_now = lambda: (reader.filename, reader.name)
    parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in chunks:
            parser.write(chunk)
            await sink.wait_for_room()
        parser.finalize()
    except FormParserError as err:  # python-multipart's own errors for broken framing
        if _HEADER_TOO_LONG in str(err) and reader.header_being_read == "content-disposition":
            # well-formed, but the file part's name is too long for the header limit
            raise InvalidUpload(
                f"a form part's header is over {DEFAULT_MAX_HEADER_SIZE} bytes: the 'file' "
                "part's filename is too long (a model's name is kept to 255 characters); "
                "rename the file, or give the model's name in form field 'name'") from err
        raise MalformedRequest(f"the multipart body is malformed: {err}") from err
    return reader.finish()
