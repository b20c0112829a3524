"""A model with its external data files, sent as one tar archive, read as its bytes arrive.

A model over 2 GB is an .onnx file plus data files its tensors name by relative path, so an
upload of one is a set of files. A tar (uncompressed: the weights do not compress, and the
worker unpacks it as it streams in) carries the set with its folders. `ArchiveReader` walks the
archive as it is fed, holding nothing but a header at a time, and hands each member's bytes on
as they pass (the .onnx file's to the skeleton builder, optimizer/model/skeleton.py); it hashes
every member, so the set's hash does not depend on the order or the metadata the archiver
wrote (`ModelArchive.set_sha256`).

Only regular files and folders may be in it: a symlink, hard link, device, FIFO or sparse
member is refused, as is a name that is absolute, climbs out with `..`, holds a backslash or a
control character, or comes twice. The formats read: ustar with its prefix field, POSIX pax
(`path` and `size` records: what Python's tarfile writes) and GNU long names (what GNU tar
writes), sizes in octal or base-256.
"""

from __future__ import annotations

import hashlib
import posixpath
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from optimizer.errors import InvalidModelError
from optimizer.model.external_data import escapes_folder

__all__ = ["ARCHIVE_BLOCK", "MAX_MEMBERS", "ArchiveMember", "ArchiveReader", "ModelArchive",
           "is_tar_header"]

MAX_MEMBERS = 65536  # a file per tensor is a layout exporters write; a model has fewer tensors
ARCHIVE_BLOCK = _BLOCK = 512  # tar's unit: a header, and what each file's data is padded to
_MAX_NAME_RECORD_BYTES = 64 * 1024  # a pax header or GNU long name, held whole
_REGULAR, _CONTIGUOUS, _OLD_REGULAR, _FOLDER = b"0", b"7", b"\0", b"5"
_PAX, _GLOBAL_PAX, _GNU_LONG_NAME, _GNU_LONG_LINK = b"x", b"g", b"L", b"K"
_REFUSED_TYPES = {b"1": "a hard link", b"2": "a symlink", b"3": "a character device",
                  b"4": "a block device", b"6": "a FIFO", b"S": "a GNU sparse file",
                  b"V": "a GNU volume header", b"M": "a GNU multi-volume part"}
_HINT = ("Pack the .onnx file and its data files as they lie in their folder: "
         "tar -cf model.tar -C <folder> model.onnx model.onnx.data (or `fuseforge submit "
         "model.onnx`, which does it).")


def is_tar_header(block: bytes) -> bool:
    """True if `block` (an upload's first 512 bytes) is a tar header: ustar's magic at byte 257
    (an ONNX protobuf cannot have it there: its first field is the IR version)."""
    return len(block) >= _BLOCK and block[257:262] == b"ustar"


@dataclass(frozen=True)
class ArchiveMember:
    name: str  # normalized: no "./", folders joined with "/"
    size: int
    sha256: str


@dataclass(frozen=True)
class ModelArchive:
    """What an archive held: its one .onnx file and the other files, in archive order."""

    model: ArchiveMember
    data_files: tuple[ArchiveMember, ...]

    @property
    def folder(self) -> str:
        """The .onnx file's folder inside the archive ("" at its top)."""
        return posixpath.dirname(self.model.name)

    def relative_to_model(self, member: ArchiveMember) -> str:
        """`member`'s path as the model's tensors name it (relative to the model's folder)."""
        return posixpath.relpath(member.name, self.folder or ".")

    @property
    def set_sha256(self) -> str:
        """The hash of the set: its files' paths, sizes and hashes, whatever their order."""
        digest = hashlib.sha256(b"fuseforge model archive 1\n")
        for member in sorted((self.model, *self.data_files), key=lambda m: m.name):
            digest.update(f"{member.sha256} {member.size} {member.name}\n".encode())
        return digest.hexdigest()


class ArchiveReader:
    """Feed it the archive's bytes in order (`feed`), then `finish` for what it held.

    `on_model(member name, data)` is called with the .onnx member's bytes as they pass; a
    refusal is an InvalidModelError raised by `feed` at once."""

    def __init__(self, name: str, on_model: Callable[[str, bytes], None]) -> None:
        self._name = name  # the archive, as the user knows it
        self._on_model = on_model
        self._buffer = bytearray()
        self._offset = 0  # bytes fed before _buffer[0]
        self._pending: dict[str, str] = {}  # pax or GNU records for the next member
        self._record: tuple[bytes, int] | None = None  # (type, size) of a record being read
        self._member: _Reading | None = None
        self._padding = 0  # bytes after a member's data up to its next block
        self._members: list[ArchiveMember] = []
        self._names: set[str] = set()
        self._model: ArchiveMember | None = None
        self._zero_blocks = 0
        self._ended = False

    def feed(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            if self._ended:
                if any(view):
                    self._refuse("holds bytes after its end-of-archive blocks")
                return
            if self._member is not None:
                view = self._member_data(view)
            elif self._padding:
                taken = min(self._padding, len(view))
                self._padding -= taken
                self._offset += taken
                view = view[taken:]
            else:
                view = self._header_bytes(view)

    def finish(self) -> ModelArchive:
        """What the archive held.

        Raises:
            InvalidModelError: it ended inside a member or header, or holds no .onnx file.
        """
        if self._member is not None or self._record is not None or self._buffer:
            self._refuse("ends in the middle of a file: the upload is cut short")
        if not self._zero_blocks and self._members:
            # Archivers end with zero blocks; a cut at a file's end is still a cut.
            self._refuse("ends without its end-of-archive blocks: the upload is cut short")
        if self._model is None:
            names = ", ".join(repr(m.name) for m in self._members[:5]) or "nothing"
            self._refuse(f"holds no .onnx file (it holds {names})")
        archive = ModelArchive(self._model,
                               tuple(m for m in self._members if m is not self._model))
        for member in archive.data_files:
            if archive.relative_to_model(member).startswith("../"):
                self._refuse(f"holds {member.name!r}, outside the folder of its model "
                             f"{archive.model.name!r}, where no tensor can name it")
        return archive

    def _member_data(self, view: memoryview) -> memoryview:
        member = self._member
        assert member is not None
        taken = min(member.left, len(view))
        piece = view[:taken]
        member.digest.update(piece)
        if member.is_model:
            self._on_model(member.name, bytes(piece))
        member.left -= taken
        self._offset += taken
        if member.left == 0:
            self._end_member(member)
        return view[taken:]

    def _end_member(self, member: _Reading) -> None:
        done = ArchiveMember(member.name, member.size, member.digest.hexdigest())
        self._members.append(done)
        if member.is_model:
            self._model = done
        self._member = None
        self._padding = -member.size % _BLOCK

    def _header_bytes(self, view: memoryview) -> memoryview:
        wanted = self._record[1] + -self._record[1] % _BLOCK if self._record else _BLOCK
        taken = min(wanted - len(self._buffer), len(view))
        self._buffer += view[:taken]
        if len(self._buffer) == wanted:
            block, self._buffer = bytes(self._buffer), bytearray()
            if self._record is not None:
                kind, size = self._record
                self._record = None
                self._read_record(kind, block[:size])
            else:
                self._read_header(block)
            self._offset += wanted
        return view[taken:]

    def _read_header(self, block: bytes) -> None:
        if not any(block):
            self._zero_blocks += 1
            self._ended = self._zero_blocks == 2
            return
        if self._zero_blocks:
            self._refuse(f"has a zero block inside it at byte {self._offset - _BLOCK}")
        if not is_tar_header(block) or not _checksum_holds(block):
            self._refuse(f"has a broken tar header at byte {self._offset}: it is not a tar "
                         "archive, or it is damaged")
        kind = block[156:157]
        size = self._size(block)
        if kind in (_PAX, _GLOBAL_PAX, _GNU_LONG_NAME, _GNU_LONG_LINK):
            if size > _MAX_NAME_RECORD_BYTES:
                self._refuse(f"has a {size}-byte extended header at byte {self._offset}; at "
                             f"most {_MAX_NAME_RECORD_BYTES} bytes are read")
            self._record = (kind, size)
            if size == 0:
                self._record = None
            return
        name = self._pending.pop("path", None) or _ustar_name(block, self._refuse)
        size = int(self._pending.pop("size", size))
        self._pending.clear()
        if kind in _REFUSED_TYPES:
            self._refuse(f"holds {name!r}, which is {_REFUSED_TYPES[kind]}: only files and "
                         "folders are read")
        if kind not in (_REGULAR, _CONTIGUOUS, _OLD_REGULAR, _FOLDER):
            self._refuse(f"holds {name!r} of tar type {kind!r}: only files and folders are read")
        normalized = self._checked_name(name)
        if kind == _FOLDER or (kind == _OLD_REGULAR and name.endswith("/")):
            return  # the folders of the set follow from its files' paths
        if normalized in self._names:
            self._refuse(f"holds {normalized!r} twice")
        if len(self._names) >= MAX_MEMBERS:
            self._refuse(f"holds more than {MAX_MEMBERS} files")
        self._names.add(normalized)
        is_model = normalized.lower().endswith(".onnx")
        if is_model and self._model is not None:
            self._refuse(f"holds two .onnx files ({self._model.name!r} and {normalized!r}): "
                         "send one model an upload")
        member = _Reading(normalized, size, is_model)
        if size == 0:
            self._end_member(member)
        else:
            self._member = member

    def _read_record(self, kind: bytes, data: bytes) -> None:
        if kind == _PAX:
            self._pending.update(_pax_records(data, self._refuse))
        elif kind == _GNU_LONG_NAME:
            self._pending["path"] = _text(data.rstrip(b"\0"), self._refuse)
        # global pax headers and GNU long link names change nothing read here

    def _size(self, block: bytes) -> int:
        field = block[124:136]
        if field[0] & 0x80:  # base-256: GNU's form for sizes of 8 GiB and over
            return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
        text = field.rstrip(b" \0").lstrip(b" ")
        if not text or not all(48 <= c <= 55 for c in text):
            self._refuse(f"has a tar header at byte {self._offset} whose size field "
                         f"{bytes(field)!r} is not an octal number")
        return int(text, 8)

    def _checked_name(self, name: str) -> str:
        for char in name:
            if unicodedata.category(char) == "Cc":
                self._refuse(f"holds a file name with the control character {char!r}: "
                             f"{name[:80]!r}")
        if "\\" in name:
            self._refuse(f"holds {name!r}, whose name has a backslash: name folders with '/'")
        stripped = name.rstrip("/")
        if escapes_folder(stripped):
            self._refuse(f"holds {name!r}, which is not a path inside the archive: a member's "
                         "name is relative, without '..'")
        return posixpath.normpath(stripped)

    def _refuse(self, what: str) -> NoReturn:
        raise InvalidModelError(f"Archive {self._name!r} {what}. {_HINT}")


class _Reading:
    """A member whose data is passing."""

    def __init__(self, name: str, size: int, is_model: bool) -> None:
        self.name = name
        self.size = size
        self.left = size
        self.is_model = is_model
        self.digest = hashlib.sha256()


def _checksum_holds(block: bytes) -> bool:
    stored = block[148:156].rstrip(b" \0").lstrip(b" ")
    if not stored or not all(48 <= c <= 55 for c in stored):
        return False
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b > 127)
    return int(stored, 8) in (unsigned, signed)  # old archivers summed signed bytes


def _ustar_name(block: bytes, refuse: Callable[[str], NoReturn]) -> str:
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0] if block[257:263] == b"ustar\x00" else b""
    return _text(prefix + b"/" + name if prefix else name, refuse)


def _pax_records(data: bytes, refuse: Callable[[str], NoReturn]) -> dict[str, str]:
    """A pax header's `length key=value\\n` records (only path and size are used)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        space = data.find(b" ", position)
        length_text = data[position:space]
        if space < 0 or not length_text.isdigit():
            refuse("has a malformed pax header")
        length = int(length_text)
        record = data[space + 1:position + length]
        if length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            refuse("has a malformed pax header")
        key, value = record[:-1].split(b"=", 1)
        if key in (b"path", b"size"):
            records[key.decode("ascii", "replace")] = _text(value, refuse)
        position += length
    if "size" in records and not records["size"].isdigit():
        refuse(f"has a pax size record {records['size']!r} that is not a number")
    return records


def _text(data: bytes, refuse: Callable[[str], NoReturn]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        refuse(f"holds a file name that is not UTF-8: {data[:80]!r}")
