"""Write a ModelProto to a file one initializer at a time, as the bytes SerializeToString makes.

`model.SerializeToString()` encodes the whole model into one buffer that grows by doubling and
then copies it into a bytes object: for a 98 MB ResNet-50 about 300 MB of fresh memory, whose
page faults alone take 0.2 s on a small VM, for a file written once. Here the model's fields
other than the graph, and the graph's fields other than its initializers, are serialized as
one small message each, and every initializer on its own, so the largest buffer is the largest
tensor and each one's memory is reused for the next. The protobuf wire format is a sequence of
(tag, value) records, a message field's value being its length and bytes, and upb writes them
in field-number order: writing the records in that order gives SerializeToString's bytes.

With a data file, tensors' bytes go into it as they are written (optimizer/model/data_file.py):
the .onnx file then holds the graph and small tensors only, which is how a model over
protobuf's 2 GB limit is written at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx
from google.protobuf.unknown_fields import UnknownFieldSet

from optimizer.model.data_file import DataFileWriter
from optimizer.model.graphs import graph_tensors, iter_tensors
from optimizer.model.proto_fields import without_fields

__all__ = ["write_model_file"]

_LENGTH_DELIMITED = 2
_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number


def write_model_file(model: onnx.ModelProto, path: Path, *, data_location: str | None = None,
                     data_folder: Path | None = None) -> None:
    """Write `model` to `path`: the bytes of `model.SerializeToString()`, without building them
    in memory at once.

    With `data_location`, tensors' bytes go into the file of that name in `path`'s folder
    instead: those of at least data_file.MIN_EXTERNAL_BYTES of raw data, and every tensor
    already external, copied from `data_folder` (the folder of the file it was read from).
    Without, an external tensor is written as it is: its location must hold beside `path`.
    """
    path = Path(path)
    data_file = (contextlib.nullcontext(None) if data_location is None else
                 DataFileWriter(path.parent / data_location, data_location,
                                data_folder=data_folder))
    with data_file as data, path.open("wb") as file:
        for piece in _pieces(model, data):
            file.write(piece)


def _pieces(model: onnx.ModelProto, data: DataFileWriter | None) -> Iterator[bytes]:
    graph = model.graph
    if (not model.HasField("graph") or not graph.initializer
            or len(UnknownFieldSet(model)) or len(UnknownFieldSet(graph))):
        # Unknown fields (from a newer onnx) are kept only by serializing the message whole.
        if data is None:
            yield model.SerializeToString()
            return
        whole = onnx.ModelProto()
        whole.CopyFrom(model)
        _move(iter_tensors(whole), data)
        yield whole.SerializeToString()
        return
    head, rest = without_fields(model, "graph"), without_fields(graph, "initializer")
    if data is not None:  # (copies: the caller's model keeps its bytes)
        _move(iter_tensors(head), data)  # local functions' tensors; its graph is empty
        _move(graph_tensors(rest), data)  # Constant nodes, subgraphs, sparse initializers
    before_graph, after_graph = _split(head.SerializeToString(), _GRAPH)
    before_tensors, after_tensors = _split(rest.SerializeToString(), _INITIALIZER)
    # Moved tensors are small (their bytes are in the data file): kept until written.
    written = (list(graph.initializer) if data is None
               else [_moved_or_same(tensor, data) for tensor in graph.initializer])
    # ByteSize encodes each tensor once more, into memory the next one reuses: the graph's
    # length comes before its initializers in the file.
    sizes = [tensor.ByteSize() for tensor in written]
    tensor_tag = _tag(_INITIALIZER)
    graph_size = (len(before_tensors) + len(after_tensors)
                  + sum(len(tensor_tag) + len(_varint(size)) + size for size in sizes))
    yield before_graph + _tag(_GRAPH) + _varint(graph_size) + before_tensors
    for tensor, size in zip(written, sizes, strict=True):
        yield tensor_tag + _varint(size)
        yield tensor.SerializeToString()
    yield after_tensors + after_graph


def _moved_or_same(tensor: onnx.TensorProto, data: DataFileWriter) -> onnx.TensorProto:
    moved = data.moved(tensor)
    return tensor if moved is None else moved


def _move(tensors: Iterable[onnx.TensorProto], data: DataFileWriter) -> None:
    """Point each of `tensors` (in a copy of the caller's model) at the data file, in place."""
    for tensor in list(tensors):
        moved = data.moved(tensor)
        if moved is not None:
            tensor.CopyFrom(moved)


def _split(encoded: bytes, number: int) -> tuple[bytes, bytes]:
    """`encoded` (a message's records, in field-number order) cut before the first record of
    a field numbered above `number`."""
    position = 0
    while position < len(encoded):
        key, after_key = _read_varint(encoded, position)
        if key >> 3 > number:
            break
        position = _skip_value(encoded, after_key, key & 7)
    return encoded[:position], encoded[position:]


def _skip_value(encoded: bytes, position: int, wire_type: int) -> int:
    if wire_type == 0:  # varint
        return _read_varint(encoded, position)[1]
    if wire_type == 1:  # 64-bit
        return position + 8
    if wire_type == _LENGTH_DELIMITED:
        length, start = _read_varint(encoded, position)
        return start + length
    if wire_type == 5:  # 32-bit
        return position + 4
    # Groups (3, 4) are proto2's deprecated encoding; onnx's messages declare none.
    raise ValueError(f"unexpected protobuf wire type {wire_type} in a serialized onnx message")


def _read_varint(encoded: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = encoded[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _tag(number: int) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
