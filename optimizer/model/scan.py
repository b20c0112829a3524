"""Read an uploaded file's protobuf framing without loading it: is it plausibly an ONNX model?

A ModelProto on disk is a sequence of top-level fields, each a varint tag (field number and
wire type) followed by a varint, a fixed-size value or a length and that many bytes. Walking the
tags and seeking past the values costs a few reads per field and no memory, so a 2 GB file of
random bytes, a zip or a JPEG is refused at once, instead of after loading it all to parse it.
A model must also carry the fields every ONNX model has (ir_version, opset_import, graph).

Passing the scan proves only the framing; `optimizer.model_check.check_model_file` then parses
and checks the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from optimizer.errors import InvalidModelError

__all__ = ["scan_model_file"]

_IR_VERSION, _GRAPH, _OPSET_IMPORT = 1, 7, 8  # onnx.proto's ModelProto field numbers
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_MAX_FIELDS = 1_000_000  # a real model has a dozen top-level fields; a bound on the walk
_HINT = "Upload the binary .onnx file written by onnx.save or torch.onnx.export."


def scan_model_file(path: Path, name: str | None = None) -> None:
    """Raise InvalidModelError unless `path` is framed as a protobuf ModelProto with the fields
    every ONNX model has; `name` is what messages call the file (default: its own name)."""
    path = Path(path)
    file_name = name or path.name
    size = path.stat().st_size
    if size == 0:
        raise InvalidModelError(f"Model file {file_name!r} is not a valid ONNX model: the file "
                                "is empty.")
    seen: set[int] = set()
    with path.open("rb") as handle:
        for _ in range(_MAX_FIELDS):
            offset = handle.tell()
            if offset == size:
                break
            tag = _varint(handle)
            if tag is None:
                raise _not_protobuf(file_name, offset, "a field tag runs past the end of the file")
            field, wire_type = tag >> 3, tag & 7
            if field == 0:
                raise _not_protobuf(file_name, offset, "a field numbered 0")
            _skip_value(handle, wire_type, size, file_name, offset)
            seen.add(field)
    missing = [what for number, what in ((_IR_VERSION, "no ir_version"),
                                         (_OPSET_IMPORT, "no opset_import"), (_GRAPH, "no graph"))
               if number not in seen]
    if missing:
        raise InvalidModelError(
            f"Model file {file_name!r} parses as protobuf but is not an ONNX model: it has "
            f"{', '.join(missing)}. {_HINT}")


def _skip_value(handle: BinaryIO, wire_type: int, size: int, file_name: str, offset: int) -> None:
    if wire_type == _VARINT:
        if _varint(handle) is None:
            raise _not_protobuf(file_name, offset, "a number runs past the end of the file")
        return
    if wire_type == _LENGTH_DELIMITED:
        length = _varint(handle)
        if length is None or handle.tell() + length > size:
            raise _not_protobuf(file_name, offset, "a field longer than the rest of the file")
        handle.seek(length, 1)
        return
    width = {_FIXED64: 8, _FIXED32: 4}.get(wire_type)
    if width is None or handle.tell() + width > size:
        raise _not_protobuf(file_name, offset, f"a field of wire type {wire_type}, which a "
                            "model never uses")
    handle.seek(width, 1)


def _varint(handle: BinaryIO) -> int | None:
    """The varint at the handle's position; None at the end of the file or past 10 bytes."""
    value = shift = 0
    for _ in range(10):
        byte = handle.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value
        shift += 7
    return None


def _not_protobuf(file_name: str, offset: int, problem: str) -> InvalidModelError:
    return InvalidModelError(
        f"Model file {file_name!r} is not an ONNX protobuf: at byte {offset}, {problem}. {_HINT}")
