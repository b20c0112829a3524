"""The multipart form an upload arrives in: part `file` (the upload) and an optional `name`.

python-multipart's streaming parser calls `FormReader` as bytes arrive; it bounds each part's
headers itself (since 0.0.27: 8 headers of at most 4 KiB). Faults of the form's framing and size
(too many parts, oversized headers or text fields, no closing boundary) make the request
malformed: 400 MalformedRequest. A well-formed form with the wrong contents (no `file`, two
files, an unexpected field, a control character in a name) is 422 InvalidUpload. Unexpected or
repeated text fields are reported once the form is read, so the part limits hold whatever the
fields are called; an unexpected *file* part is refused at once, as reading on would only
waste its bytes.
"""

import unicodedata
from collections.abc import Callable

from python_multipart.multipart import parse_options_header

from api.services.errors import InvalidUpload, MalformedRequest

__all__ = [
    "MAX_PARTS",
    "MAX_TEXT_FIELD_BYTES",
    "FormReader",
    "refuse_control_characters",
]

MAX_PARTS = 16  # the form has two fields; more parts than this is not a client's mistake
MAX_TEXT_FIELD_BYTES = 4096
_SHOWN_CHARS = 40


def refuse_control_characters(text: str, what: str) -> str:
    """`text` itself, unless it holds a control character (NUL, newline, ESC...).

    Raises:
        InvalidUpload: naming `what` (e.g. "the upload's filename") and the first one found.
    """
    for position, char in enumerate(text):
        if unicodedata.category(char) == "Cc":
            raise InvalidUpload(
                f"{what} {_shown(text)} holds the control character {char!r} at position "
                f"{position}; send a name of printable characters")
    return text


def _shown(text: str) -> str:
    return repr(text[:_SHOWN_CHARS]) + ("..." if len(text) > _SHOWN_CHARS else "")


class FormReader:
    """Callbacks for python-multipart's MultipartParser: field `file` goes to `write_file`."""

    def __init__(self, write_file: Callable[[bytes], None]) -> None:
        self.write_file = write_file
        self.filename: str | None = None
        self.name: str | None = None
        self.saw_file = False
        self.complete = False  # the closing boundary arrived
        self._parts = 0
        self._header_field = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._field: str | None = None
        self._text = bytearray()
        self._seen_fields: set[str] = set()
        self._problems: list[str] = []  # 422s reported once the form is read

    def on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise MalformedRequest(
                f"the multipart form has more than {MAX_PARTS} parts; send one 'file' part "
                "and optionally one 'name' part")
        self._headers = {}
        self._field = None
        self._text = bytearray()

    @property
    def header_being_read(self) -> str:
        """The name of the part header whose value is being read (lower case), "" between."""
        return self._header_field.decode("latin-1").lower()

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
        raw_filename = params.get(b"filename")
        if field == "file":
            if self.saw_file:
                raise InvalidUpload("the form has more than one 'file' field; upload one file")
            self.saw_file = True
            if raw_filename:
                self.filename = refuse_control_characters(
                    raw_filename.decode("utf-8", "replace"), "the upload's filename")
        elif raw_filename is not None:
            raise InvalidUpload(
                f"unexpected file field {_shown(field)}; send the upload as field 'file' "
                "(curl -F file=@model.onnx)")
        elif field != "name":
            self._problems.append(f"unexpected form field {_shown(field)}")
        elif field in self._seen_fields:
            self._problems.append("more than one 'name' field")
        self._seen_fields.add(field)
        self._field = field

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field == "file":
            self.write_file(data[start:end])
            return
        self._text += data[start:end]
        if len(self._text) > MAX_TEXT_FIELD_BYTES:
            raise MalformedRequest(
                f"form field {_shown(self._field or '')} is longer than {MAX_TEXT_FIELD_BYTES} "
                "bytes; only 'file' may be large")

    def on_part_end(self) -> None:
        if self._field == "name":
            text = self._text.decode("utf-8", "replace").strip()
            self.name = refuse_control_characters(text, "form field 'name'") or None

    def on_end(self) -> None:
        self.complete = True

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
                "on_end",
            )
        }

    def finish(self) -> tuple[str | None, str | None]:
        """(filename, name) once the whole body is read.

        Raises:
            MalformedRequest: the body ended before the form's closing boundary (python-multipart
                does not check this itself), so the file may be cut short.
            InvalidUpload: the form had no 'file' part, or text fields other than one 'name'.
        """
        if not self.complete:
            raise MalformedRequest("the multipart body ended before its closing boundary, so "
                                   "the upload may be incomplete; send the whole form")
        problems = ([] if self.saw_file else ["the form has no 'file' field"]) + self._problems
        if problems:
            raise InvalidUpload(f"{'; '.join(problems[:3])}: upload with curl -F "
                                "file=@model.onnx and optionally one -F name=...")
        return self.filename, self.name
