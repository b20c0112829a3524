"""Receive an uploaded file by streaming it to disk in chunks while hashing it.

Memory stays flat whatever the file size, and the size limit is enforced while bytes arrive, so an
oversized upload is cut off early instead of being written out first. Accepts multipart/form-data
(field `file`, optional field `name`) or a raw `application/octet-stream` body.
"""

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from python_multipart.multipart import MultipartParser, parse_options_header

from api.services.errors import InvalidUpload, UploadTooLarge

__all__ = ["ReceivedFile", "receive_upload"]

_MAX_TEXT_FIELD_BYTES = 4096


@dataclass(frozen=True)
class ReceivedFile:
    path: Path  # a temporary file the caller must move or delete
    filename: str | None
    name: str | None  # the optional `name` form field
    sha256: str
    size_bytes: int


class _FileSink:
    """Writes and hashes one file, refusing to grow past `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.digest = hashlib.sha256()
        self.size = 0
        self._handle: BinaryIO = path.open("wb")

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise UploadTooLarge(
                f"the upload exceeds the limit of {self.max_bytes} bytes "
                "(FUSEFORGE_MAX_UPLOAD_BYTES)"
            )
        self.digest.update(data)
        self._handle.write(data)

    def close(self) -> None:
        self._handle.close()


class _FormReader:
    """Callbacks for python-multipart's streaming parser: field `file` goes to the sink."""

    def __init__(self, sink: _FileSink) -> None:
        self.sink = sink
        self.filename: str | None = None
        self.name: str | None = None
        self.saw_file = False
        self._header_field = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._field: str | None = None
        self._text = bytearray()

    def on_part_begin(self) -> None:
        self._headers = {}
        self._field = None
        self._text = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._header_field.lower()] = self._header_value
        self._header_field = self._header_value = b""

    def on_headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        field = params.get(b"name", b"").decode("utf-8", "replace")
        if field == "file":
            if self.saw_file:
                raise InvalidUpload("the form has more than one 'file' field; upload one model")
            self.saw_file = True
            raw_filename = params.get(b"filename")
            self.filename = raw_filename.decode("utf-8", "replace") if raw_filename else None
        elif field != "name":
            raise InvalidUpload(f"unexpected form field {field!r}; send 'file' and optionally 'name'")
        self._field = field

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field == "file":
            self.sink.write(data[start:end])
            return
        self._text += data[start:end]
        if len(self._text) > _MAX_TEXT_FIELD_BYTES:
            raise InvalidUpload(f"form field 'name' is longer than {_MAX_TEXT_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._field == "name":
            self.name = self._text.decode("utf-8", "replace").strip() or None

    def callbacks(self) -> dict[str, object]:
        return {
            name: getattr(self, name)
            for name in (
                "on_part_begin",
                "on_header_field",
                "on_header_value",
                "on_header_end",
                "on_headers_finished",
                "on_part_data",
                "on_part_end",
            )
        }


async def receive_upload(
    *,
    chunks: AsyncIterator[bytes],
    content_type: str,
    content_length: int | None,
    temp_dir: Path,
    max_bytes: int,
    raw_name: str | None = None,
) -> ReceivedFile:
    """Stream the request body into a temporary file under `temp_dir`; delete it on any error."""
    # Multipart framing adds a little; refuse early only what is certainly too large.
    if content_length is not None and content_length > max_bytes + 64 * 1024:
        raise UploadTooLarge(
            f"the upload is {content_length} bytes; the limit is {max_bytes} bytes "
            "(FUSEFORGE_MAX_UPLOAD_BYTES)"
        )
    temp_dir.mkdir(parents=True, exist_ok=True)
    path = temp_dir / f"upload-{uuid.uuid4().hex}.part"
    sink = _FileSink(path, max_bytes)
    try:
        media_type, params = parse_options_header(content_type)
        if media_type == b"multipart/form-data":
            filename, name = await _read_multipart(chunks, params, sink)
        elif media_type == b"application/octet-stream":
            async for chunk in chunks:
                sink.write(chunk)
            filename, name = None, raw_name
        else:
            raise InvalidUpload(
                f"unsupported Content-Type {content_type or '(none)'!r}: send multipart/form-data "
                "with a 'file' field (curl -F file=@model.onnx) or application/octet-stream",
                status_code=415,
            )
        sink.close()
        return ReceivedFile(path, filename, name, sink.digest.hexdigest(), sink.size)
    except BaseException:
        sink.close()
        path.unlink(missing_ok=True)
        raise


async def _read_multipart(
    chunks: AsyncIterator[bytes], params: dict[bytes, bytes], sink: _FileSink
) -> tuple[str | None, str | None]:
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidUpload("the multipart/form-data Content-Type has no boundary")
    reader = _FormReader(sink)
    parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in chunks:
            parser.write(chunk)
        parser.finalize()
    except (InvalidUpload, UploadTooLarge):
        raise
    except Exception as err:  # python-multipart raises its own errors for broken framing
        raise InvalidUpload(f"the multipart body is malformed: {err}") from err
    if not reader.saw_file:
        raise InvalidUpload("the form has no 'file' field; upload with curl -F file=@model.onnx")
    return reader.filename, reader.name
