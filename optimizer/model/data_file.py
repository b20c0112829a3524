"""Move a model's tensor bytes into one external data file as the model is written.

`DataFileWriter` appends each tensor's bytes at an offset aligned to `ALIGNMENT` (so a reader
can memory-map a tensor in place: a page boundary) and hands back the tensor's new form: its
fields without `raw_data`, pointing at the file by `location`, `offset` and `length`, as onnx's
own external data format says. A tensor that is already external is copied across from the
folder it was read from, in chunks, never whole in memory.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import onnx

from optimizer.errors import InternalError
from optimizer.model.external_data import location_of
from optimizer.model.proto_fields import without_fields

__all__ = ["ALIGNMENT", "MIN_EXTERNAL_BYTES", "DataFileWriter"]

ALIGNMENT = 4096
MIN_EXTERNAL_BYTES = 1024  # smaller tensors stay in the .onnx file (onnx.save's threshold too)
_COPY_CHUNK = 16 * 2**20


class DataFileWriter:
    """Appends tensors' bytes to `path`, which the model's tensors will call `location`."""

    def __init__(self, path: Path, location: str, *, data_folder: Path | None) -> None:
        self.path, self.location, self.data_folder = Path(path), location, data_folder
        self._file: BinaryIO = self.path.open("wb")
        self._position = 0

    def __enter__(self) -> DataFileWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._file.close()

    def moved(self, tensor: onnx.TensorProto) -> onnx.TensorProto | None:
        """`tensor` as it reads from this file, its bytes appended; None for one that stays
        where it is (under MIN_EXTERNAL_BYTES of raw data, or data in typed fields)."""
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            offset, length = self._copied_from_source(tensor)
        elif tensor.ByteSize() < MIN_EXTERNAL_BYTES:
            return None  # (ByteSize: reading raw_data would copy the bytes out to look)
        else:
            data = tensor.raw_data  # one copy out of the message, written and let go
            if len(data) < MIN_EXTERNAL_BYTES:
                return None  # its data is in typed fields (float_data...), or small
            offset, length = self._append(data), len(data)
            del data
        moved = without_fields(tensor, "raw_data", "external_data", "data_location")
        moved.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(offset)),
                           ("length", str(length))):
            entry = moved.external_data.add()
            entry.key, entry.value = key, value
        return moved

    def _append(self, data: bytes) -> int:
        offset = self._aligned()
        self._file.write(data)
        self._position = offset + len(data)
        return offset

    def _copied_from_source(self, tensor: onnx.TensorProto) -> tuple[int, int]:
        if self.data_folder is None:
            raise InternalError(f"Tensor {tensor.name!r} is external, but no folder to read its "
                                "data from was given.")
        entries = {entry.key: entry.value for entry in tensor.external_data}
        source_offset = int(entries.get("offset", "0"))
        source = self.data_folder / location_of(tensor)
        with source.open("rb") as read:
            read.seek(source_offset)
            length = (int(entries["length"]) if "length" in entries
                      else source.stat().st_size - source_offset)
            offset = self._aligned()
            copied = _copy_exactly(read, self._file, length)
        if copied != length:
            raise InternalError(f"Tensor {tensor.name!r}: {source} ended {length - copied} "
                                "bytes early (it changed after the model was checked).")
        self._position = offset + length
        return offset, length

    def _aligned(self) -> int:
        padding = -self._position % ALIGNMENT
        if padding:
            self._file.write(b"\0" * padding)
            self._position += padding
        return self._position


def _copy_exactly(read: BinaryIO, write: BinaryIO, length: int) -> int:
    copied = 0
    while copied < length:
        chunk = read.read(min(_COPY_CHUNK, length - copied))
        if not chunk:
            break
        write.write(chunk)
        copied += len(chunk)
    return copied
