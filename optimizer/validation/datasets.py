"""Load a user's validation dataset (.npz) and check it against the model's inputs.

The file holds one array per model input, named after it, with a leading sample axis, and
optionally `labels` (integer class ids, leading sample axis too). Sample i of every array is
one model call, with the input's full shape, batch dim included: for an input declared
[N, 3, 224, 224] the array is [samples, N, 3, 224, 224] (e.g. [100, 1, 3, 224, 224]). This is
the layout `POST /v1/datasets` accepts (api/services/dataset_files.py). A dynamic dim takes
the size the array gives it, the same for every input that shares its name. If the model has an
input called `labels`, that array feeds the input and the dataset has no labels.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

from optimizer.errors import OptimizerError
from optimizer.tensor_specs import Dim, TensorSpec, numpy_dtype, shared_dim_conflict

__all__ = ["LABELS", "Dataset", "DatasetError", "load_dataset"]

LABELS = "labels"


class DatasetError(OptimizerError):
    """The evaluation data (a dataset file, its labels, the class-score outputs named) does not fit the model."""


@dataclass(frozen=True)
class Dataset:
    """Feeds ready for `Runner.infer`, one per sample, and the labels (one row per sample)."""

    feeds: list[dict[str, np.ndarray]]
    labels: np.ndarray | None

    @property
    def samples(self) -> int:
        return len(self.feeds)


def load_dataset(source: str | os.PathLike[str] | IO[bytes],
                 inputs: Sequence[TensorSpec]) -> Dataset:
    """Read an .npz from a path or binary file and check it against `inputs` (the model's).

    Nothing is unpickled: object arrays are refused.

    >>> dataset = load_dataset("val.npz", summary.inputs)       # doctest: +SKIP
    >>> outputs = [runner.infer(feed) for feed in dataset.feeds]   # doctest: +SKIP

    Raises:
        DatasetError: not an .npz (or unreadable), no arrays or no samples, an input without
            an array, an array for no input (and not `labels`), a dtype or shape that does not
            fit the input, labels that are not integers, or arrays of different sample counts.
    """
    arrays = _read_npz(source)
    if not arrays:
        raise DatasetError("The dataset holds no arrays; save one array per model input "
                           "(np.savez(path, **{input_name: array})).")
    names = [spec.name for spec in inputs]
    missing = [name for name in names if name not in arrays]
    if missing:
        raise DatasetError(
            f"The dataset has no array for input(s) {_names(missing)}; the model's inputs are "
            f"{_names(names)} and the dataset holds {_names(arrays)}.")
    extra = [key for key in arrays if key not in names and key != LABELS]
    if extra:
        raise DatasetError(
            f"The dataset holds array(s) {_names(extra)} that feed no input; the model's inputs "
            f"are {_names(names)} (plus an optional {LABELS!r} array). Rename or drop them.")
    labels = arrays.get(LABELS) if LABELS not in names else None
    if labels is not None:
        _check_labels(labels)
    samples = _sample_count({name: arrays[name] for name in names} |
                            ({LABELS: labels} if labels is not None else {}))
    for spec in inputs:
        _check_input(spec, arrays[spec.name])
    _check_shared_dims(inputs, arrays)
    feeds = [{name: arrays[name][i] for name in names} for i in range(samples)]
    return Dataset(feeds=feeds, labels=labels)


def _read_npz(source: str | os.PathLike[str] | IO[bytes]) -> dict[str, np.ndarray]:
    shown = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the upload"
    if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
        raise DatasetError(f"Dataset {shown!r} does not exist or is not a file.")
    try:
        if not zipfile.is_zipfile(source):
            raise DatasetError(
                f"Dataset {shown!r} is not an .npz file (a zip of .npy arrays); save it with "
                "np.savez(path, **arrays) or np.savez_compressed.")
        if not isinstance(source, (str, os.PathLike)):
            source.seek(0)  # is_zipfile read from the file object
        with np.load(source, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except DatasetError:
        raise
    except ValueError as err:
        # np.load refuses object arrays without pickle, and says so in a ValueError.
        raise DatasetError(
            f"Dataset {shown!r} holds an array FuseForge cannot read without unpickling "
            f"(object dtype?) or a malformed .npy: {err}. Save plain numeric arrays.") from err
    except (OSError, zipfile.BadZipFile, EOFError, io.UnsupportedOperation) as err:
        raise DatasetError(f"Dataset {shown!r} could not be read as an .npz: {err}.") from err


def _check_labels(labels: np.ndarray) -> None:
    if labels.dtype.kind not in "iu":
        raise DatasetError(
            f"The {LABELS!r} array has dtype {labels.dtype.name}; labels are integer class ids "
            "(e.g. labels.astype(np.int64)).")
    if labels.ndim == 0:
        raise DatasetError(f"The {LABELS!r} array is a scalar; give one class id (or one row "
                           "of ids) per sample, with a leading sample axis.")


def _sample_count(arrays: Mapping[str, np.ndarray]) -> int:
    for name, array in arrays.items():
        if array.ndim == 0:
            raise DatasetError(
                f"Array {name!r} is a scalar; every array needs a leading sample axis.")
    counts = {name: int(array.shape[0]) for name, array in arrays.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{name!r}: {count}" for name, count in counts.items())
        raise DatasetError(
            f"The dataset's arrays hold different numbers of samples ({shown}); the leading "
            "axis of every array is the sample axis and must have the same length.")
    samples = next(iter(counts.values()))
    if samples == 0:
        raise DatasetError("The dataset is empty: its arrays hold 0 samples.")
    return samples


def _check_input(spec: TensorSpec, array: np.ndarray) -> None:
    try:
        expected = numpy_dtype(spec.dtype)
    except TypeError:
        raise DatasetError(
            f"Input {spec.name!r} has dtype {spec.dtype!r}, which a dataset cannot feed; "
            "only numeric and bool inputs are supported.") from None
    if array.dtype != expected:
        raise DatasetError(
            f"Array {spec.name!r} has dtype {array.dtype.name}, but the model's input "
            f"{spec.name!r} is {expected.name}; save it as {expected.name} "
            f"(array.astype(np.{expected.name})).")
    sample = array.shape[1:]
    if len(sample) == len(spec.shape) and all(
            _fits(dim, size) for dim, size in zip(spec.shape, sample, strict=True)):
        return
    hint = ""
    if len(sample) + 1 == len(spec.shape) and spec.shape and _fits(spec.shape[0], 1):
        hint = " To feed each row as a batch of one, add that axis: array[:, None]."
    raise DatasetError(
        f"Array {spec.name!r} has shape {list(array.shape)}, which does not fit the model's "
        f"input {spec.name!r} of shape [{_dims(spec.shape)}]: each sample is one model call "
        f"with the full input shape, batch dim included, so the array needs shape "
        f"[samples, {_dims(spec.shape)}].{hint}")


def _check_shared_dims(inputs: Sequence[TensorSpec], arrays: Mapping[str, np.ndarray]) -> None:
    conflict = shared_dim_conflict(inputs, lambda spec, axis: arrays[spec.name].shape[1 + axis])
    if conflict is not None:
        raise DatasetError(
            f"Inputs {conflict.first_input!r} and {conflict.input!r} share the dynamic dim "
            f"{conflict.dim!r}, but the dataset gives it {conflict.first_value} and "
            f"{conflict.value}; make them equal.")


def _fits(declared: Dim, size: int) -> bool:
    return not isinstance(declared, int) or declared == size


def _dims(shape: Sequence[Dim]) -> str:
    return ", ".join("?" if dim is None else str(dim) for dim in shape)


def _names(names: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(repr(name) for name in names) or "none"
