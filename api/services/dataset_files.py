"""Read what an uploaded .npz dataset holds from its array headers, without loading the arrays.

A dataset is an `.npz` (`np.savez` / `np.savez_compressed`) with one array per model input,
named after the input, and an optional `labels` array. Every array has a leading sample axis of
the same length S; sample i of each array is one model call, so an array for an input of shape
[N, 3, 32, 32] has shape [S, N, 3, 32, 32] (the model's batch dim N is part of each sample).
`labels`, when present, is 1-D: S integer class indices, labels[i] the class of sample i.

Only each member's .npy header (dtype, shape) is read, plus the small `labels` array, so checking
a large upload costs little memory. `np.load` runs with `allow_pickle=False`, and an object
array (whose data would be a pickle) is refused from its header before any data is read.
"""

import math
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

from api.services.errors import InvalidDatasetFile
from optimizer.tensor_specs import TensorSpec

__all__ = ["LABELS", "DatasetContents", "read_dataset_file"]

LABELS = "labels"

_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; an empty archive
_NPY_MAGIC = b"\x93NUM"
_HEADER_READERS: dict[tuple[int, int], Callable[[IO[bytes]], tuple[Any, bool, np.dtype[Any]]]] = {
    (1, 0): npy_format.read_array_header_1_0,
    (2, 0): npy_format.read_array_header_2_0,
}
_HOW_TO = "save one array per model input with np.savez('data.npz', input=x, labels=y)"


@dataclass(frozen=True)
class DatasetContents:
    """What a dataset file holds: `arrays` describe ONE sample (shape without the sample axis)."""

    samples: int
    arrays: tuple[TensorSpec, ...]  # in archive order, `labels` excluded
    has_labels: bool


def read_dataset_file(path: Path) -> DatasetContents:
    """Check an uploaded .npz and describe it.

    Raises:
        InvalidDatasetFile: not an .npz, unreadable or corrupt, no arrays, a non-numeric (object,
            string, structured) or big-endian array, a scalar or empty array, arrays whose
            leading (sample) axes differ, or `labels` that are not 1-D non-negative integers.
    """
    with path.open("rb") as handle:
        magic = handle.read(4)
    if not magic:
        raise InvalidDatasetFile(f"the uploaded dataset is empty; {_HOW_TO}")
    if magic not in _ZIP_MAGICS:
        found = "a single .npy array" if magic == _NPY_MAGIC else "not a zip archive"
        raise InvalidDatasetFile(f"the uploaded dataset is {found}, not an .npz; {_HOW_TO}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            headers = [_read_header(archive.zip, info) for info in archive.zip.infolist()]
            labels = archive[LABELS] if any(name == LABELS for name, _, _ in headers) else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
        raise InvalidDatasetFile(f"the uploaded .npz cannot be read ({err}); {_HOW_TO}") from err
    return _describe(headers, labels)


_Header = tuple[str, np.dtype[Any], tuple[int, ...]]  # array name, dtype, full shape


def _read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Header:
    if info.is_dir() or not info.filename.endswith(".npy"):
        raise InvalidDatasetFile(
            f"the .npz member {info.filename!r} is not a .npy array; {_HOW_TO}")
    name = info.filename.removesuffix(".npy")
    with archive.open(info) as member:
        version = npy_format.read_magic(member)
        read_header = _HEADER_READERS.get(version)
        if read_header is None:
            raise InvalidDatasetFile(
                f"array {name!r} uses .npy format version {version[0]}.{version[1]}; save it "
                "with np.savez, which writes versions 1.0 and 2.0")
        shape, _, dtype = read_header(member)
        header_bytes = member.tell()
    _check_dtype(name, dtype)
    data_bytes = math.prod(shape) * dtype.itemsize
    if info.file_size != header_bytes + data_bytes:
        raise InvalidDatasetFile(
            f"array {name!r} is truncated or corrupt: its header declares shape {list(shape)} "
            f"{dtype.name} ({data_bytes} bytes) but the archive holds "
            f"{info.file_size - header_bytes} bytes of data")
    return name, dtype, tuple(int(dim) for dim in shape)


def _check_dtype(name: str, dtype: np.dtype[Any]) -> None:
    if dtype.hasobject:
        raise InvalidDatasetFile(
            f"array {name!r} holds Python objects (dtype object), which only a pickle can "
            "restore, and pickles are refused; save a numeric array, e.g. "
            "np.asarray(values, dtype=np.float32)")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise InvalidDatasetFile(
            f"array {name!r} has dtype {dtype.str!r}; datasets hold bool, integer or float "
            "arrays with the dtype of the model input they feed")
    if dtype.byteorder == ">":
        raise InvalidDatasetFile(
            f"array {name!r} is big-endian ({dtype.str!r}); save it little-endian, e.g. "
            f"array.astype({dtype.newbyteorder('<').str!r})")


def _describe(headers: list[_Header], labels: np.ndarray | None) -> DatasetContents:
    counted = Counter(name for name, _, _ in headers)
    repeated = [name for name, count in counted.items() if count > 1]
    if repeated:
        raise InvalidDatasetFile(f"the .npz holds array(s) {_names(repeated)} more than once")
    for name, _, shape in headers:
        if not shape:
            raise InvalidDatasetFile(
                f"array {name!r} is a scalar; every array needs a leading sample axis "
                "(shape [samples, ...])")
        if 0 in shape:
            raise InvalidDatasetFile(
                f"array {name!r} has shape {list(shape)} and holds no values; every array "
                "needs at least one sample and no axis of length 0")
    inputs = [(name, dtype, shape) for name, dtype, shape in headers if name != LABELS]
    if not inputs:
        found = "only 'labels'" if headers else "no arrays"
        raise InvalidDatasetFile(f"the .npz holds {found}; {_HOW_TO}")
    counts = {name: shape[0] for name, _, shape in headers}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{name!r} has {count}" for name, count in counts.items())
        raise InvalidDatasetFile(
            f"the arrays disagree on the number of samples (their leading axis): {shown}; "
            "every array, labels included, needs the same number")
    samples = inputs[0][2][0]
    if labels is not None:
        _check_labels(labels, samples)
    return DatasetContents(
        samples=samples,
        arrays=tuple(TensorSpec(name, dtype.name, shape[1:]) for name, dtype, shape in inputs),
        has_labels=labels is not None,
    )


def _check_labels(labels: np.ndarray, samples: int) -> None:
    if labels.ndim != 1:
        raise InvalidDatasetFile(
            f"'labels' has shape {list(labels.shape)}; labels are 1-D, one class index per "
            f"sample (shape [{samples}])")
    if labels.dtype.kind not in "iu":
        raise InvalidDatasetFile(
            f"'labels' has dtype {labels.dtype.name}; labels are integer class indices, e.g. "
            "labels.astype(np.int64)")
    if int(labels.min()) < 0:
        raise InvalidDatasetFile(
            f"'labels' holds negative values (the least is {int(labels.min())}); labels are "
            "class indices counted from 0")


def _names(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names)
