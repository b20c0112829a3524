"""The .npz dataset contract, checked from the array headers alone or loaded against a model.

A dataset is an .npz (np.savez / np.savez_compressed) holding one array per model input, named
after it, and optionally `labels`. Every array has a leading sample axis of the same length S;
sample i of every array is one model call with the input's full shape, batch dim included: for
an input declared [N, 3, 224, 224] the array is [S, N, 3, 224, 224] (e.g. [100, 1, 3, 224, 224]).
`labels` holds integer class ids >= 0 with the same leading axis and any per-sample shape:
metrics.class_metrics flattens each sample's labels, so a sample of batch N carries N labels.
A dynamic dim takes the size the array gives it, the same for every input that shares its name.
If the model has an input called `labels`, that array feeds the input and there are no labels.

`inspect_dataset` checks a file while no model is known (what `POST /v1/datasets` does with an
upload): it reads each member's .npy header (dtype, shape) and only the small `labels` array, so
checking a large file costs little memory. `value_ranges` then reads the input arrays one at a
time for their least and greatest values (what a calibration's ranges start from).
`load_dataset` applies the same rules, checks the headers against the model's inputs, and only
then loads the arrays. Nothing is unpickled: an object array is refused from its header before
any of its data is read.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

from optimizer.errors import DatasetError
from optimizer.model.tensor_specs import Dim, TensorSpec, numpy_dtype, shared_dim_conflict

__all__ = ["LABELS", "Dataset", "DatasetContents", "ValueRange", "inspect_dataset", "load_dataset",
           "value_ranges"]

LABELS = "labels"

Source = str | os.PathLike[str] | IO[bytes]  # a path, or a binary file open for reading

_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; an empty archive
_NPY_MAGIC = b"\x93NUM"
_HEADER_READERS: dict[tuple[int, int], Callable[[IO[bytes]], tuple[Any, bool, np.dtype[Any]]]] = {
    (1, 0): npy_format.read_array_header_1_0,
    (2, 0): npy_format.read_array_header_2_0,
}
# What reading a malformed archive or member raises (np.load reports a bad .npy as ValueError).
_READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
                io.UnsupportedOperation)
_HOW_TO = "save one array per model input with np.savez('data.npz', input=x, labels=y)"


@dataclass(frozen=True)
class DatasetContents:
    """What a dataset file holds: `arrays` describe ONE sample (shape without the sample axis)."""

    samples: int
    arrays: tuple[TensorSpec, ...]  # in archive order, `labels` excluded
    has_labels: bool


@dataclass(frozen=True)
class ValueRange:
    """The least and greatest value of one array (a bool array's are 0.0 and 1.0)."""

    name: str
    min: float
    max: float


@dataclass(frozen=True)
class Dataset:
    """Feeds ready for `Runner.infer`, one per sample, and the labels (leading sample axis)."""

    feeds: list[dict[str, np.ndarray]]
    labels: np.ndarray | None

    @property
    def samples(self) -> int:
        return len(self.feeds)


@dataclass(frozen=True)
class _Header:
    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # the full shape, sample axis first


def inspect_dataset(source: Source, *, name: str | None = None) -> DatasetContents:
    """Check a dataset file with no model known, from its headers and its `labels`, and
    describe it. `name` is how messages call the file (default: its file name).

    Raises:
        DatasetError: missing, empty, not an .npz, unreadable or corrupt (a truncated member);
            an array that is not bool, integer or float (object arrays: pickles are refused),
            big-endian, a scalar or empty; an array stored twice, no arrays (or only
            `labels`); arrays whose sample counts differ; or labels that are not integers
            >= 0.
    """
    shown = _shown(source, name)
    with _opened(source, shown) as (archive, headers):
        samples = _check_headers(headers, labels_are_input=False)
        has_labels = any(header.name == LABELS for header in headers)
        if has_labels:
            _check_label_values(_load(archive, [LABELS], shown)[LABELS])
    return DatasetContents(
        samples=samples,
        arrays=tuple(TensorSpec(h.name, h.dtype.name, h.shape[1:]) for h in headers
                     if h.name != LABELS),
        has_labels=has_labels,
    )


def value_ranges(source: Source, *, name: str | None = None) -> tuple[ValueRange, ...]:
    """The value range of each input array (in archive order, `labels` excluded), loading one
    array at a time. Call it on a file `inspect_dataset` accepted. `name` as for it.

    Raises:
        DatasetError: the file cannot be read, or an array holds NaN or an infinity (a range
            computed over it, and any calibration from it, would be meaningless).
    """
    shown = _shown(source, name)
    ranges = []
    with _opened(source, shown) as (archive, headers):
        for header in headers:
            if header.name == LABELS:
                continue
            array = _load(archive, [header.name], shown)[header.name]
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                nans = int(np.isnan(array).sum())
                infs = int(np.isinf(array).sum())
                raise DatasetError(
                    f"Array {header.name!r} holds {nans} NaN and {infs} infinite value(s); "
                    "datasets hold finite values only: replace them (np.nan_to_num) or drop "
                    "those samples.")
            ranges.append(ValueRange(header.name, float(array.min()), float(array.max())))
    return tuple(ranges)


def load_dataset(source: Source, inputs: Sequence[TensorSpec], *,
                 name: str | None = None) -> Dataset:
    """Read an .npz from a path or binary file and check it against `inputs` (the model's).

    The rules of `inspect_dataset` apply first, then the fit to the model, all before any
    array is loaded. `name` is how messages call the file (default: its file name).

    >>> dataset = load_dataset("val.npz", summary.inputs)       # doctest: +SKIP
    >>> outputs = [runner.infer(feed) for feed in dataset.feeds]   # doctest: +SKIP

    Raises:
        DatasetError: anything `inspect_dataset` refuses; an input without an array, an array
            for no input (and not `labels`), or a dtype or shape that does not fit its input.
    """
    shown = _shown(source, name)
    names = [spec.name for spec in inputs]
    with _opened(source, shown) as (archive, headers):
        samples = _check_headers(headers, labels_are_input=LABELS in names)
        _check_fit(inputs, {header.name: header for header in headers})
        has_labels = LABELS not in names and any(header.name == LABELS for header in headers)
        arrays = _load(archive, [*names, *([LABELS] if has_labels else [])], shown)
    labels = arrays.pop(LABELS) if has_labels else None
    if labels is not None:
        _check_label_values(labels)
    feeds = [{name: arrays[name][i] for name in names} for i in range(samples)]
    return Dataset(feeds=feeds, labels=labels)


def _shown(source: Source, name: str | None) -> str:
    if name is not None:
        return name
    return os.path.basename(os.fspath(source)) if isinstance(source, (str, os.PathLike)) \
        else "the upload"


@contextmanager
def _opened(source: Source, shown: str) -> Iterator[tuple[Any, list[_Header]]]:
    """The open archive (an NpzFile) and the header of each member, in archive order."""
    magic = _magic(source, shown)
    if not magic:
        raise DatasetError(f"Dataset {shown!r} is empty; {_HOW_TO}.")
    if magic not in _ZIP_MAGICS:
        found = "a single .npy array" if magic == _NPY_MAGIC else "not a zip archive"
        raise DatasetError(f"Dataset {shown!r} is not an .npz file: it is {found}; {_HOW_TO} "
                           "(or np.savez_compressed).")
    try:
        archive = np.load(source, allow_pickle=False)
    except _READ_ERRORS as err:
        raise _unreadable(shown, err) from err
    with archive:
        try:
            headers = [_read_header(archive.zip, info) for info in archive.zip.infolist()]
        except _READ_ERRORS as err:
            raise _unreadable(shown, err) from err
        yield archive, headers


def _magic(source: Source, shown: str) -> bytes:
    if not isinstance(source, (str, os.PathLike)):
        source.seek(0)  # the whole file, wherever its writer left the position
        magic = source.read(4)
        source.seek(0)
        return magic
    if not os.path.isfile(source):
        raise DatasetError(f"Dataset {shown!r} does not exist or is not a file.")
    with open(source, "rb") as handle:
        return handle.read(4)


def _load(archive: Any, names: Sequence[str], shown: str) -> dict[str, np.ndarray]:
    try:
        return {name: archive[name] for name in names}
    except _READ_ERRORS as err:
        raise _unreadable(shown, err) from err


def _unreadable(shown: str, err: BaseException) -> DatasetError:
    return DatasetError(f"Dataset {shown!r} cannot be read as an .npz ({err}); {_HOW_TO}.")


def _read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Header:
    if info.is_dir() or not info.filename.endswith(".npy"):
        raise DatasetError(f"The .npz member {info.filename!r} is not a .npy array; {_HOW_TO}.")
    name = info.filename.removesuffix(".npy")
    with archive.open(info) as member:
        version = npy_format.read_magic(member)
        read_header = _HEADER_READERS.get(version)
        if read_header is None:
            raise DatasetError(
                f"Array {name!r} uses .npy format version {version[0]}.{version[1]}; save it "
                "with np.savez, which writes versions 1.0 and 2.0.")
        shape, _, dtype = read_header(member)
        header_bytes = member.tell()
    _check_dtype(name, dtype)
    data_bytes = math.prod(shape) * dtype.itemsize
    if info.file_size != header_bytes + data_bytes:
        raise DatasetError(
            f"Array {name!r} is truncated or corrupt: its header declares shape {list(shape)} "
            f"{dtype.name} ({data_bytes} bytes) but the archive holds "
            f"{info.file_size - header_bytes} bytes of data.")
    return _Header(name, dtype, tuple(int(dim) for dim in shape))


def _check_dtype(name: str, dtype: np.dtype[Any]) -> None:
    if dtype.hasobject:
        raise DatasetError(
            f"Array {name!r} holds Python objects (dtype object), which FuseForge cannot read "
            "without unpickling, and pickles are refused; save a numeric array, e.g. "
            "np.asarray(values, dtype=np.float32).")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise DatasetError(
            f"Array {name!r} has dtype {dtype.str!r}; datasets hold bool, integer or float "
            "arrays with the dtype of the model input they feed.")
    if dtype.byteorder == ">":
        raise DatasetError(
            f"Array {name!r} is big-endian ({dtype.str!r}); save it little-endian, e.g. "
            f"array.astype({dtype.newbyteorder('<').str!r}).")


def _check_headers(headers: Sequence[_Header], *, labels_are_input: bool) -> int:
    """The rules every dataset meets whatever the model; the number of samples."""
    repeated = [name for name, count in Counter(h.name for h in headers).items() if count > 1]
    if repeated:
        raise DatasetError(f"The .npz holds array(s) {_names(repeated)} more than once.")
    for header in headers:
        _check_shape(header)
    inputs = [h for h in headers if h.name != LABELS or labels_are_input]
    if not inputs:
        found = f"only {LABELS!r}" if headers else "no arrays"
        raise DatasetError(f"The dataset holds {found}; {_HOW_TO}.")
    counts = {h.name: h.shape[0] for h in headers}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name!r}: {count}" for name, count in counts.items())
        each = ", ".join(f"{name!r} has {count}" for name, count in counts.items())
        raise DatasetError(
            f"The dataset's arrays hold different numbers of samples ({listed}): along the "
            f"leading (sample) axis {each}, and every array, labels included, needs the same "
            "number.")
    labels = next((h for h in headers if h.name == LABELS), None)
    if labels is not None and not labels_are_input and labels.dtype.kind not in "iu":
        raise DatasetError(
            f"The {LABELS!r} array has dtype {labels.dtype.name}; labels are integer class ids "
            "(integer class indices counted from 0), e.g. labels.astype(np.int64).")
    return inputs[0].shape[0]


def _check_shape(header: _Header) -> None:
    name, shape = header.name, header.shape
    if not shape:
        raise DatasetError(f"Array {name!r} is a scalar; every array needs a leading sample "
                           "axis (shape [samples, ...]).")
    if shape[0] == 0:
        raise DatasetError(f"The dataset is empty: its arrays hold 0 samples (array {name!r} "
                           f"has shape {list(shape)} and holds no values).")
    if 0 in shape:
        raise DatasetError(f"Array {name!r} has shape {list(shape)} and holds no values; every "
                           "array needs at least one sample and no axis of length 0.")


def _check_label_values(labels: np.ndarray) -> None:
    least = int(labels.min())
    if least < 0:
        raise DatasetError(
            f"The {LABELS!r} array holds negative values (the least is {least}); labels are "
            "class indices counted from 0.")


def _check_fit(inputs: Sequence[TensorSpec], headers: Mapping[str, _Header]) -> None:
    names = [spec.name for spec in inputs]
    missing = [name for name in names if name not in headers]
    if missing:
        raise DatasetError(
            f"The dataset has no array for input(s) {_names(missing)}; the model's inputs are "
            f"{_names(names)} and the dataset holds {_names(list(headers))}.")
    extra = [key for key in headers if key not in names and key != LABELS]
    if extra:
        raise DatasetError(
            f"The dataset holds array(s) {_names(extra)} that feed no input; the model's inputs "
            f"are {_names(names)} (plus an optional {LABELS!r} array). Rename or drop them.")
    for spec in inputs:
        _check_input(spec, headers[spec.name])
    conflict = shared_dim_conflict(inputs, lambda spec, axis: headers[spec.name].shape[1 + axis])
    if conflict is not None:
        raise DatasetError(
            f"Inputs {conflict.first_input!r} and {conflict.input!r} share the dynamic dim "
            f"{conflict.dim!r}, but the dataset gives it {conflict.first_value} and "
            f"{conflict.value}; make them equal.")


def _check_input(spec: TensorSpec, header: _Header) -> None:
    try:
        expected = numpy_dtype(spec.dtype)
    except TypeError:
        raise DatasetError(
            f"Input {spec.name!r} has dtype {spec.dtype!r}, which a dataset cannot feed; "
            "only numeric and bool inputs are supported.") from None
    if header.dtype != expected:
        raise DatasetError(
            f"Array {spec.name!r} has dtype {header.dtype.name}, but the model's input "
            f"{spec.name!r} is {expected.name}; save it as {expected.name} "
            f"(array.astype(np.{expected.name})).")
    sample = header.shape[1:]
    if len(sample) == len(spec.shape) and all(
            _fits(dim, size) for dim, size in zip(spec.shape, sample, strict=True)):
        return
    hint = ""
    if len(sample) + 1 == len(spec.shape) and spec.shape and _fits(spec.shape[0], 1):
        hint = " To feed each row as a batch of one, add that axis: array[:, None]."
    raise DatasetError(
        f"Array {spec.name!r} has shape {list(header.shape)}, which does not fit the model's "
        f"input {spec.name!r} of shape [{_dims(spec.shape)}]: each sample is one model call "
        f"with the full input shape, batch dim included, so the array needs shape "
        f"[samples, {_dims(spec.shape)}].{hint}")


def _fits(declared: Dim, size: int) -> bool:
    return not isinstance(declared, int) or declared == size


def _dims(shape: Sequence[Dim]) -> str:
    return ", ".join("?" if dim is None else str(dim) for dim in shape)


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names) or "none"
