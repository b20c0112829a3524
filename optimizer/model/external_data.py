"""Check a model's external data before anything reads it.

A protobuf cannot exceed 2 GB, so a large model comes as its .onnx file and data files beside
it: each tensor stored outside names its bytes by `location` (relative to the .onnx file's
folder), `offset` and `length`. Those are strings an uploader chooses, and the ONNX checker and
ONNX Runtime open what they name. So before either sees the model, every location must be a
relative path that stays inside the folder (no absolute path, no `..`, no symlink on the way),
name a regular file (not a FIFO a reader would block on), and its range must lie inside that
file and hold exactly the tensor's bytes.
"""

from __future__ import annotations

import math
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from optimizer.errors import InvalidModelError
from optimizer.model.graphs import iter_tensors
from optimizer.model.skeleton import SkeletonBuilder

__all__ = ["ExternalData", "ExternalDataFile", "check_external_data", "data_file_locations",
           "external_tensors", "escapes_folder", "location_of"]

# Packed types, by name: the newer ones exist only in newer onnx releases.
_SUB_BYTE_BITS = {getattr(onnx.TensorProto, name): bits for name, bits in (
    ("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2),
    ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6)) if hasattr(onnx.TensorProto, name)}
_HINT = ("Save the model with onnx.save(model, path, save_as_external_data=True, "
         "location=...) and keep its data files beside the .onnx file.")


@dataclass(frozen=True)
class ExternalDataFile:
    location: str  # as the tensors name it, relative to the model's folder
    size: int  # bytes in the file
    tensors: int  # how many tensors read from it


@dataclass(frozen=True)
class ExternalData:
    """The files a model's external tensors read, in the order they are first named."""

    files: tuple[ExternalDataFile, ...]
    tensor_bytes: int  # what the tensors read, in all

    @property
    def file_bytes(self) -> int:
        return sum(file.size for file in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"files": [vars(file) for file in self.files], "tensor_bytes": self.tensor_bytes,
                "file_bytes": self.file_bytes}


def external_tensors(model: onnx.ModelProto) -> Iterable[onnx.TensorProto]:
    """Every stored tensor of `model` (subgraphs, Constant nodes, local functions) whose data
    is in an external file."""
    return (tensor for tensor in iter_tensors(model)
            if tensor.data_location == onnx.TensorProto.EXTERNAL)


def location_of(tensor: onnx.TensorProto) -> str:
    # Read by hand: onnx's ExternalDataInfo raises a bare ValueError on a malformed offset.
    return next((entry.value for entry in tensor.external_data if entry.key == "location"), "")


def data_file_locations(path: Path) -> tuple[str, ...]:
    """The data files the model at `path` names (normalized, "/" between folders, in the
    order first named), read without its weights: the file streams through a skeleton
    builder (optimizer/model/skeleton.py), so memory stays flat whatever its size.

    Raises:
        InvalidModelError: the file is not an ONNX protobuf.
    """
    builder = SkeletonBuilder(path.name)
    with path.open("rb") as handle:
        while chunk := handle.read(2**20):
            builder.feed(chunk)
    skeleton = builder.finish()
    try:
        model = onnx.load_model_from_string(skeleton.data)
    except Exception as err:  # protobuf's DecodeError, or onnx's own on a wrong message
        raise InvalidModelError(f"Model file {path.name!r} is not an ONNX protobuf: {err}") from err
    locations: dict[str, None] = {}
    for tensor in external_tensors(model):
        location = location_of(tensor)
        if location != skeleton.location:
            locations[posixpath.normpath(location.replace("\\", "/"))] = None
    return tuple(locations)


def escapes_folder(location: str) -> bool:
    """True if `location` is empty, absolute or, once normalized, climbs out of its folder
    (a backslash counts as a separator: Windows exporters write them)."""
    unified = location.replace("\\", "/")
    if not unified or unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        return True
    normalized = posixpath.normpath(unified)
    return normalized == ".." or normalized.startswith("../")


def check_external_data(model: onnx.ModelProto, folder: Path, file_name: str, *,
                        skip: str | None = None) -> ExternalData:
    """Check every external tensor of `model`, whose .onnx file is in `folder`, and sum up
    the files they read. `file_name` names the model in messages; tensors at location `skip`
    are left out (a skeleton's stand-ins). Reads no tensor data: only the files' metadata.

    Raises:
        InvalidModelError: a location is empty, absolute, climbs out of `folder`, passes
            through a symlink, or names no regular file; an offset or length is not a whole
            number of bytes, runs past its file's end, or disagrees with the tensor's
            shape and element type (string tensors cannot be external).
    """
    files: dict[str, ExternalDataFile] = {}
    tensor_bytes = 0
    for tensor in external_tensors(model):
        where = f"Model file {file_name!r}: tensor {tensor.name!r}"
        location = location_of(tensor)
        if skip is not None and location == skip:
            continue
        if escapes_folder(location) or "\0" in location:
            raise InvalidModelError(
                f"{where} stores its data at {location!r}, which is not a path inside the "
                f"model's folder: a location is relative, without '..'. {_HINT}")
        normalized = posixpath.normpath(location.replace("\\", "/"))
        known = files.get(normalized)
        size = known.size if known else _regular_file_size(folder, normalized, where, location)
        offset = _whole_bytes(tensor, "offset", where, default=0)
        expected = _tensor_bytes(tensor, where)
        length = _whole_bytes(tensor, "length", where, default=size - offset)
        if offset + length > size:
            raise InvalidModelError(
                f"{where} reads bytes {offset} to {offset + length} of {location!r}, which "
                f"holds {size} bytes: the data file is truncated or not this model's. {_HINT}")
        if length != expected:
            raise InvalidModelError(
                f"{where} reads {length} bytes of {location!r}, but its shape "
                f"{list(tensor.dims)} of {onnx.TensorProto.DataType.Name(tensor.data_type)} "
                f"holds {expected}: the offsets are not this data file's. {_HINT}")
        tensor_bytes += length
        files[normalized] = ExternalDataFile(normalized, size, known.tensors + 1 if known else 1)
    return ExternalData(tuple(files.values()), tensor_bytes)


def _regular_file_size(folder: Path, normalized: str, where: str, location: str) -> int:
    path = Path(folder)
    for part in normalized.split("/"):
        path = path / part
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise InvalidModelError(
                f"{where} stores its data in {location!r}, which is not beside the model: "
                f"give every data file the model names. {_HINT}") from None
        if stat.S_ISLNK(info.st_mode):
            raise InvalidModelError(
                f"{where} stores its data at {location!r}, which passes through the symlink "
                f"{part!r}: data files are read only from inside the model's folder. {_HINT}")
    if not stat.S_ISREG(info.st_mode):
        raise InvalidModelError(
            f"{where} stores its data at {location!r}, which is not a regular file. {_HINT}")
    return info.st_size


def _whole_bytes(tensor: onnx.TensorProto, key: str, where: str, *, default: int) -> int:
    text = next((entry.value for entry in tensor.external_data if entry.key == key), None)
    if text is None:
        return default
    if not text.isdigit() or not text.isascii():
        raise InvalidModelError(
            f"{where} has external data {key} {text!r}, which is not a whole number of "
            f"bytes. {_HINT}")
    return int(text)


def _tensor_bytes(tensor: onnx.TensorProto, where: str) -> int:
    if tensor.data_type == onnx.TensorProto.STRING:
        raise InvalidModelError(f"{where} is a string tensor stored as external data, which "
                                f"ONNX does not allow. {_HINT}")
    count: int = math.prod(tensor.dims)
    bits = _SUB_BYTE_BITS.get(int(tensor.data_type))
    if bits is not None:
        return (count * bits + 7) // 8
    try:
        itemsize = int(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize)
    except KeyError:
        raise InvalidModelError(
            f"{where} has element type {tensor.data_type}, which is not an ONNX "
            "TensorProto.DataType. Re-export the model.") from None
    return count * itemsize
