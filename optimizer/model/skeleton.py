"""A model's skeleton, built while its bytes arrive: the ModelProto without its weights' bytes.

Checking an upload used to mean parsing the whole file (two to three times its size in memory)
and letting the ONNX checker read it again; for a 2 GB model that is most of the upload's time.
Nothing in the check reads a large tensor's values, so `SkeletonBuilder` walks the protobuf as
it is fed (no file, no seeking) and keeps everything but those values: a tensor's data field
(raw_data, float_data, int32_data, int64_data, double_data, uint64_data) of at least
`STRIPPED_FROM_BYTES` is dropped, and the tensor names a stand-in external file instead (an
empty file the caller puts beside the skeleton, under a name no upload can guess, so the check
tells these tensors from a model's own external data). What the ONNX checker did with those
bytes (their length against the tensor's shape) is done here, and what the check read of their
values, their NaN and infinity counts, is counted on the way past. Small tensors (a Loop's trip
count, a Reshape's shape) stay whole, as do sparse tensors, whose indices the checker reads.

The walk knows which fields hold messages that can hold tensors (graphs, nodes, attributes,
functions, training info) and copies every other field as it is; each message's bytes are
re-framed with its new length when it ends. A broken framing (a field past its message's end,
a wire type no model uses) is an InvalidModelError naming the byte; the skeleton is held to
`max_bytes`, so a file of nothing but small fields cannot grow the caller's memory unbounded.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np

from optimizer.errors import InvalidModelError, ModelLimitError, OptimizerError

__all__ = ["STRIPPED_FROM_BYTES", "ModelSkeleton", "SkeletonBuilder", "WeightCount"]

STRIPPED_FROM_BYTES = 256
_MAX_DEPTH = 256  # messages inside messages; protobuf's own parser stops at 100
_HINT = "Upload the binary .onnx file written by onnx.save or torch.onnx.export."
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5

# onnx.proto's messages the walk enters, and their fields that hold those messages.
_MODEL, _GRAPH, _NODE, _ATTRIBUTE, _FUNCTION, _TRAINING, _TENSOR = range(7)
_CHILDREN: dict[int, dict[int, int]] = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _GRAPH: {1: _NODE, 5: _TENSOR},  # sparse_initializer (15) is copied whole
    _NODE: {5: _ATTRIBUTE},
    _ATTRIBUTE: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH},
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},
    _TENSOR: {},
}
_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _RAW_DATA = 1, 2, 8, 9
_EXTERNAL_DATA, _DATA_LOCATION, _EXTERNAL = 13, 14, 1
_DATA_FIELDS = frozenset({4, 5, 7, 9, 10, 11})
_FLOAT_DATA, _DOUBLE_DATA = 4, 10
_CAPTURED = frozenset({_DIMS, _TENSOR_NAME})  # a tensor's fields read besides being kept
# Bytes per element of the fields the checker holds to a tensor's shape ("too small for the
# declared shape"): raw_data by data type (types of less than a byte are not checked here),
# and the typed fields of fixed width. int32_data holds varints: not checked.
_RAW_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
              14: 8, 15: 16, 16: 2, 17: 1, 18: 1, 19: 1, 20: 1}
_TYPED_WIDTH = {4: (4, "float"), 7: (8, "int64"), 10: (8, "double"), 11: (8, "uint64")}
# How a stripped field's values read as floats, by (field, TensorProto.DataType): raw_data
# holds the type's own bytes; float_data and double_data hold float32 and float64.
_FLOAT, _FLOAT16, _DOUBLE, _BFLOAT16 = 1, 10, 11, 16
_RAW_FLOATS: dict[int, np.dtype] = {_FLOAT: np.dtype("<f4"), _FLOAT16: np.dtype("<f2"),
                                     _DOUBLE: np.dtype("<f8"), _BFLOAT16: np.dtype("<u2")}


@dataclass(frozen=True)
class WeightCount:
    """One stripped float tensor's element count and how many of its values are NaN or
    infinite (what optimizer/model/non_finite.py reports)."""

    name: str
    nan: int
    inf: int
    size: int


@dataclass(frozen=True)
class ModelSkeleton:
    data: bytes  # a ModelProto: the model, its large tensors' data left out
    location: str  # the stand-in external file those tensors name instead (an empty file)
    weights: tuple[WeightCount, ...]  # the stripped float tensors
    stripped_bytes: int  # how many bytes of tensor data were left out


@dataclass
class _Frame:
    kind: int
    end: int | None  # the absolute offset where the message ends (None: the file's end)
    field_tag: bytes = b""  # the tag this message had in its parent
    out: bytearray = field(default_factory=bytearray)
    data_type: int = 0  # a tensor's, once read
    captured: dict[int, bytearray] = field(default_factory=dict)  # a tensor's name and dims
    dims: list[int] = field(default_factory=list)  # a tensor's dims written one by one
    own_external: bool = False  # a tensor that says its data is in an external file
    stripped: tuple[int, int] | None = None  # (field, length) of a tensor's data left out
    counter: _Counter | None = None  # the stripped values' NaN and infinity counts


class _Counter:
    """NaN and infinity counts of a stripped field's values, fed in pieces of any length."""

    def __init__(self, dtype: np.dtype, bfloat16: bool) -> None:
        self._dtype = dtype
        self._bfloat16 = bfloat16
        self._left = b""
        self.nan = self.inf = self.size = 0

    def feed(self, data: bytes | memoryview) -> None:
        joined = self._left + bytes(data) if self._left else data
        usable = len(joined) - len(joined) % self._dtype.itemsize
        self._left = bytes(joined[usable:])
        values = np.frombuffer(joined, dtype=self._dtype, count=usable // self._dtype.itemsize)
        self.size += int(values.size)
        if self._bfloat16:  # its exponent bits all set: infinite with a zero mantissa, else NaN
            magnitude = values & 0x7FFF
            self.inf += int(np.count_nonzero(magnitude == 0x7F80))
            self.nan += int(np.count_nonzero(magnitude > 0x7F80))
        else:
            self.nan += int(np.count_nonzero(np.isnan(values)))
            self.inf += int(np.count_nonzero(np.isinf(values)))


class SkeletonBuilder:
    """Feed it the model's bytes in order (`feed`), then `finish` for the skeleton.

    A framing error is kept and raised by `finish` (the caller may go on receiving the body
    to answer once); after it, fed bytes are ignored."""

    def __init__(self, name: str, *, location: str | None = None,
                 max_bytes: int = 256 * 2**20) -> None:
        self._name = name
        # The stand-in file's name is new for each builder, so no upload can name it itself.
        self._location = location or f"stand-in-{secrets.token_hex(16)}.bin"
        self._max_bytes = max_bytes
        self._buffer = bytearray()
        self._offset = 0  # the absolute offset of _buffer[0]
        self._stack = [_Frame(_MODEL, None)]
        self._kept = 0
        self._copy_left = 0  # bytes of a copied field's value still to come
        self._skip_left = 0  # bytes of a stripped field's value still to come
        self._stripped_bytes = 0
        self._weights: list[WeightCount] = []
        self._error: OptimizerError | None = None
        self._capturing: bytearray | None = None  # where a copied value is also read into

    def feed(self, data: bytes | memoryview) -> None:
        if self._error is not None:
            return
        self._buffer += data
        try:
            consumed = self._walk()
        except (InvalidModelError, ModelLimitError) as err:
            self._error = err
            self._buffer.clear()
            return
        del self._buffer[:consumed]
        self._offset += consumed

    def finish(self) -> ModelSkeleton:
        """The skeleton; InvalidModelError for a file that ended inside a field or message."""
        if self._error is not None:
            raise self._error
        if self._offset == 0 and not self._buffer:
            raise InvalidModelError(f"Model file {self._name!r} is not a valid ONNX model: the "
                                    "file is empty.")
        if self._buffer or self._copy_left or self._skip_left or len(self._stack) > 1:
            raise self._broken(self._offset, "a field longer than the rest of the file")
        return ModelSkeleton(bytes(self._stack[0].out), self._location, tuple(self._weights),
                             self._stripped_bytes)

    def _walk(self) -> int:
        """Consume what it can of the buffer; the number of bytes consumed."""
        buffer, at = self._buffer, 0
        while True:
            if self._skip_left or self._copy_left:
                at = self._pass_value(at)
                if self._skip_left or self._copy_left:
                    return at
            frame = self._stack[-1]
            if frame.end is not None and self._offset + at == frame.end:
                self._close(frame)
                continue
            start = at
            tag, at = self._varint(buffer, at)
            if tag is None:
                return start
            tag_bytes = bytes(buffer[start:at])
            number, wire_type = tag >> 3, tag & 7
            if number == 0:
                raise self._broken(self._offset + start, "a field numbered 0")
            if wire_type == _LENGTH_DELIMITED:
                length, at = self._varint(buffer, at)
                if length is None:
                    return start
                self._field(frame, number, tag_bytes, buffer[start:at], length,
                            self._offset + at)
            elif wire_type in (_VARINT, _FIXED64, _FIXED32):
                if wire_type == _VARINT:
                    value, end = self._varint(buffer, at)
                else:
                    value, end = 0, at + (8 if wire_type == _FIXED64 else 4)
                if value is None or end > len(buffer):
                    return start
                at = end
                self._within(frame, self._offset + at, start)
                if frame.kind == _TENSOR and number == _TENSOR_DATA_TYPE:
                    frame.data_type = value or 0
                elif frame.kind == _TENSOR and number == _DIMS and wire_type == _VARINT:
                    frame.dims.append(value or 0)
                elif frame.kind == _TENSOR and number == _DATA_LOCATION:
                    frame.own_external = frame.own_external or value == _EXTERNAL
                self._keep(frame, buffer[start:at])
            else:
                raise self._broken(self._offset + start, f"a field of wire type {wire_type}, "
                                   "which a model never uses")

    def _varint(self, buffer: bytearray, at: int) -> tuple[int | None, int]:
        value, end = _read_varint(buffer, at)
        if value == -1:
            raise self._broken(self._offset + at, "a number longer than 10 bytes")
        return value, end

    def _field(self, frame: _Frame, number: int, tag: bytes, head: bytearray, length: int,
               value_at: int) -> None:
        """A length-delimited field (`head`: its tag and length) whose value starts at absolute
        offset `value_at`."""
        self._within(frame, value_at + length, value_at - len(head))
        child = _CHILDREN[frame.kind].get(number)
        if child is not None:
            if len(self._stack) >= _MAX_DEPTH:
                raise self._broken(value_at, f"messages nested over {_MAX_DEPTH} deep")
            self._stack.append(_Frame(child, value_at + length, field_tag=tag))
            return
        if frame.kind == _TENSOR and number in _DATA_FIELDS and length >= STRIPPED_FROM_BYTES:
            if frame.stripped is not None:
                raise self._broken(value_at, f"tensor {self._tensor_name(frame)!r} holds its "
                                   "data in two fields")
            frame.stripped = (number, length)
            self._skip_left = length
            self._stripped_bytes += length
            frame.counter = _counter_for(number, frame.data_type)
            return
        self._keep(frame, head)
        if frame.kind == _TENSOR and number in _CAPTURED:
            self._capturing = frame.captured.setdefault(number, bytearray())
        elif frame.kind == _TENSOR and number == _EXTERNAL_DATA:
            frame.own_external = True
        self._copy_left = length

    def _pass_value(self, at: int) -> int:
        """Copy or skip what the buffer holds of the current field's value."""
        buffer = self._buffer
        frame = self._stack[-1]
        if self._skip_left:
            take = min(self._skip_left, len(buffer) - at)
            if frame.counter is not None:
                frame.counter.feed(memoryview(buffer)[at:at + take])
            self._skip_left -= take
            return at + take
        take = min(self._copy_left, len(buffer) - at)
        piece = buffer[at:at + take]
        self._keep(frame, piece)
        if self._capturing is not None:
            self._capturing += piece
        self._copy_left -= take
        if not self._copy_left:
            self._capturing = None
        return at + take

    def _close(self, frame: _Frame) -> None:
        self._stack.pop()
        if frame.stripped is not None:
            self._close_stripped(frame, *frame.stripped)
        parent = self._stack[-1]
        framing = frame.field_tag + _varint_bytes(len(frame.out))
        parent.out += framing
        parent.out += frame.out
        self._kept += len(framing)

    def _close_stripped(self, frame: _Frame, number: int, length: int) -> None:
        """Point the tensor at the skeleton's stand-in external file, once it is certain its
        data was what the ONNX checker would have accepted."""
        name = self._tensor_name(frame)
        if frame.own_external:
            raise InvalidModelError(
                f"Model file {self._name!r} fails the ONNX checker: Data of TensorProto "
                f"(tensor name: {name}) is stored externally and should not have data field.")
        elements = 1
        for dim in frame.dims + _packed_varints(frame.captured.get(_DIMS, bytearray())):
            elements *= dim - 2**64 if dim >= 2**63 else dim  # int64 dims, as varints
        if number == _RAW_DATA and frame.data_type in _RAW_BYTES:
            required = elements * _RAW_BYTES[frame.data_type]
            if length < required:
                raise InvalidModelError(
                    f"Model file {self._name!r} fails the ONNX checker: TensorProto (tensor "
                    f"name: {name}) raw_data size ({length} bytes) is too small for the "
                    f"declared shape and type ({required} bytes required).")
        elif number in _TYPED_WIDTH:
            width, what = _TYPED_WIDTH[number]
            if length // width < elements:
                raise InvalidModelError(
                    f"Model file {self._name!r} fails the ONNX checker: TensorProto (tensor "
                    f"name: {name}) {what}_data size ({length // width}) is too small for the "
                    f"declared shape ({elements} {what} values required).")
        pointer = (_field_bytes(_DATA_LOCATION, _VARINT, _varint_bytes(_EXTERNAL))
                   + _field_bytes(_EXTERNAL_DATA, _LENGTH_DELIMITED,
                                  _field_bytes(1, _LENGTH_DELIMITED, b"location")
                                  + _field_bytes(2, _LENGTH_DELIMITED,
                                                 self._location.encode())))
        self._keep(frame, pointer)
        if frame.data_type in _RAW_FLOATS:
            counted = frame.counter  # None: a data type read after the data (not counted)
            self._weights.append(WeightCount(name, *((counted.nan, counted.inf, counted.size)
                                                     if counted else (0, 0, 0))))

    def _tensor_name(self, frame: _Frame) -> str:
        name = bytes(frame.captured.get(_TENSOR_NAME, b"")).decode("utf-8", "replace")
        return name or "a Constant's value"

    def _keep(self, frame: _Frame, data: bytes | bytearray) -> None:
        self._kept += len(data)
        if self._kept > self._max_bytes:
            raise ModelLimitError(
                f"Model file {self._name!r}: its graph without the weights' bytes is over "
                f"{self._max_bytes} bytes (small tensors, names and nodes); FuseForge checks "
                "models whose structure fits that.", limit="max_skeleton_bytes")
        frame.out += data

    def _within(self, frame: _Frame, end: int, start: int) -> None:
        if frame.end is not None and end > frame.end:
            raise self._broken(start, "a field runs past the end of the message holding it")

    def _broken(self, offset: int, problem: str) -> InvalidModelError:
        return InvalidModelError(f"Model file {self._name!r} is not an ONNX protobuf: at byte "
                                 f"{offset}, {problem}. {_HINT}")


def _counter_for(number: int, data_type: int) -> _Counter | None:
    if number == _RAW_DATA and data_type in _RAW_FLOATS:
        return _Counter(_RAW_FLOATS[data_type], bfloat16=data_type == _BFLOAT16)
    if number == _FLOAT_DATA and data_type == _FLOAT:
        return _Counter(np.dtype("<f4"), bfloat16=False)
    if number == _DOUBLE_DATA and data_type == _DOUBLE:
        return _Counter(np.dtype("<f8"), bfloat16=False)
    return None  # integers, or a data type not read yet (fields out of the usual order)


def _field_bytes(number: int, wire_type: int, value: bytes) -> bytes:
    tag = _varint_bytes(number << 3 | wire_type)
    if wire_type == _LENGTH_DELIMITED:
        return tag + _varint_bytes(len(value)) + value
    return tag + value


def _packed_varints(data: bytearray) -> list[int]:
    values, at = [], 0
    while at < len(data):
        value, at = _read_varint(data, at)
        if value is None or value < 0:
            break
        values.append(value)
    return values


def _read_varint(buffer: bytearray, at: int) -> tuple[int | None, int]:
    """The varint at `at` and the offset after it; (None, at) if the buffer ends first,
    (-1, at) if it runs past the 10 bytes a varint may take."""
    value = shift = 0
    for index in range(at, min(at + 10, len(buffer))):
        byte = buffer[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    return (-1 if len(buffer) - at >= 10 else None), at


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
