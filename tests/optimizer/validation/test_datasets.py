"""inspect_dataset and load_dataset: one .npz contract, checked from the headers or loaded
against a model, every misfit refused clearly."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from optimizer.errors import DatasetError, OptimizerError
from optimizer.model.tensor_specs import TensorSpec
from optimizer.validation.datasets import (
    DatasetContents,
    ValueRange,
    inspect_dataset,
    load_dataset,
    value_ranges,
)

IMAGE = TensorSpec("image", "float32", ("N", 3, 4, 4))
IDS = TensorSpec("ids", "int64", (1, 6))


def _npz(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def _images(samples: int = 5, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((samples, batch, 3, 4, 4)).astype(np.float32)


def test_load_dataset_gives_one_feed_per_sample_and_the_labels(tmp_path):
    images = _images()
    ids = np.random.default_rng(1).integers(0, 100, (5, 1, 6))
    labels = np.arange(10).reshape(5, 2)

    dataset = load_dataset(_npz(tmp_path, image=images, ids=ids, labels=labels), [IMAGE, IDS])

    assert dataset.samples == 5 and len(dataset.feeds) == 5
    for i, feed in enumerate(dataset.feeds):
        assert list(feed) == ["image", "ids"]
        np.testing.assert_array_equal(feed["image"], images[i])
        np.testing.assert_array_equal(feed["ids"], ids[i])
    np.testing.assert_array_equal(dataset.labels, labels)


def test_load_dataset_reads_a_compressed_upload_from_a_file_object():
    buffer = io.BytesIO()
    np.savez_compressed(buffer, image=_images(samples=3))

    dataset = load_dataset(buffer, [IMAGE])

    assert dataset.samples == 3 and dataset.labels is None


def test_an_input_named_labels_takes_the_labels_array(tmp_path):
    spec = TensorSpec("labels", "int64", (2,))

    dataset = load_dataset(_npz(tmp_path, labels=np.ones((4, 2), np.int64)), [spec])

    assert dataset.labels is None and dataset.feeds[0]["labels"].shape == (2,)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({}, "holds no arrays"),
        ({"image": _images(samples=0), "ids": np.zeros((0, 1, 6), np.int64)},
         "empty: its arrays hold 0 samples"),
        ({"ids": np.zeros((5, 1, 6), np.int64)},
         "no array for input\\(s\\) 'image'; the model's inputs are 'image', 'ids' and the "
         "dataset holds 'ids'"),
        ({"image": _images(), "ids": np.zeros((5, 1, 6), np.int64), "mask": np.ones(5)},
         "array\\(s\\) 'mask' that feed no input"),
        ({"image": _images().astype(np.float64), "ids": np.zeros((5, 1, 6), np.int64)},
         "'image' has dtype float64, but the model's input 'image' is float32; save it as "
         "float32 \\(array.astype\\(np.float32\\)\\)"),
        ({"image": _images(), "ids": np.zeros((5, 1, 7), np.int64)},
         "'ids' has shape \\[5, 1, 7\\].*input 'ids' of shape \\[1, 6\\].*needs shape "
         "\\[samples, 1, 6\\]"),
        ({"image": _images()[:, 0], "ids": np.zeros((5, 1, 6), np.int64)},
         "'image' has shape \\[5, 3, 4, 4\\].*\\[samples, N, 3, 4, 4\\]. To feed each row "
         "as a batch of one, add that axis: array\\[:, None\\]"),
        ({"image": _images(samples=5), "ids": np.zeros((4, 1, 6), np.int64)},
         "different numbers of samples \\('image': 5, 'ids': 4\\)"),
        ({"image": _images(), "ids": np.zeros((5, 1, 6), np.int64), "labels": np.zeros(3, int)},
         "different numbers of samples.*'labels': 3"),
        ({"image": _images(), "ids": np.zeros((5, 1, 6), np.int64), "labels": np.zeros(5)},
         "'labels' array has dtype float64; labels are integer class ids"),
        ({"image": np.float32(1.0), "ids": np.zeros((5, 1, 6), np.int64)},
         "'image' is a scalar; every array needs a leading sample axis"),
    ],
)
def test_load_dataset_refuses_what_does_not_fit(tmp_path, arrays, message):
    with pytest.raises(DatasetError, match=message):
        load_dataset(_npz(tmp_path, **arrays), [IMAGE, IDS])


def test_load_dataset_refuses_inputs_that_disagree_on_a_shared_dynamic_dim(tmp_path):
    specs = [TensorSpec("ids", "int64", (1, "seq")), TensorSpec("mask", "int64", (1, "seq"))]
    path = _npz(tmp_path, ids=np.zeros((2, 1, 8), np.int64), mask=np.ones((2, 1, 9), np.int64))

    with pytest.raises(DatasetError, match="share the dynamic dim 'seq'.*gives it 8 and 9"):
        load_dataset(path, specs)


def test_load_dataset_refuses_a_file_that_is_not_an_npz(tmp_path):
    text = tmp_path / "data.npz"
    text.write_text("image,label\n1,2\n")
    npy = tmp_path / "image.npy"
    np.save(npy, _images())

    for path in (text, npy):
        with pytest.raises(DatasetError, match="is not an .npz file"):
            load_dataset(path, [IMAGE])
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "missing.npz", [IMAGE])


def test_load_dataset_never_unpickles_object_arrays(tmp_path):
    path = _npz(tmp_path, image=np.array([{"a": 1}] * 2, dtype=object))

    with pytest.raises(DatasetError, match="cannot read without unpickling"):
        load_dataset(path, [IMAGE])


def test_a_truncated_npz_is_refused_as_unreadable(tmp_path):
    path = _npz(tmp_path, image=_images())
    path.write_bytes(path.read_bytes()[:200])

    with pytest.raises(DatasetError) as caught:
        load_dataset(path, [IMAGE])
    assert isinstance(caught.value, OptimizerError)


def test_inspect_dataset_describes_one_sample_of_each_array_without_a_model(tmp_path):
    path = _npz(tmp_path, image=_images(samples=5, batch=2), labels=np.arange(10).reshape(5, 2))

    assert inspect_dataset(path) == DatasetContents(
        samples=5, arrays=(TensorSpec("image", "float32", (2, 3, 4, 4)),), has_labels=True)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"image": _images(), "labels": np.array([0, 1, -1, 2, 3])}, "holds negative values"),
        ({"image": _images(), "labels": np.zeros(5)}, "integer class ids"),
        ({"image": _images(), "labels": np.arange(4)}, "'image': 5, 'labels': 4"),
        ({"image": _images().astype(">f4")}, "big-endian"),
        ({"labels": np.arange(5)}, "holds only 'labels'"),
    ],
    ids=["negative-labels", "float-labels", "label-count", "big-endian", "only-labels"],
)
def test_inspection_and_loading_refuse_a_file_by_the_same_rule(tmp_path, arrays, message):
    path = _npz(tmp_path, **arrays)

    with pytest.raises(DatasetError, match=message):
        inspect_dataset(path)
    with pytest.raises(DatasetError, match=message):
        load_dataset(path, [IMAGE])


def test_messages_call_the_file_by_the_name_given(tmp_path):
    path = tmp_path / "upload-1234.part"
    path.write_bytes(b"")

    with pytest.raises(DatasetError, match="Dataset 'cifar.npz' is empty"):
        inspect_dataset(path, name="cifar.npz")


def test_value_ranges_are_each_input_arrays_least_and_greatest_value(tmp_path: Path) -> None:
    path = _npz(
        tmp_path, ids=np.array([[3, -2], [7, 0]], np.int64), mask=np.array([[True], [False]]),
        x=np.array([[0.5], [-1.25]], np.float32), labels=np.array([4, 9]))

    assert value_ranges(path) == (ValueRange("ids", -2.0, 7.0), ValueRange("mask", 0.0, 1.0),
                                  ValueRange("x", -1.25, 0.5))


def test_value_ranges_refuse_an_array_holding_nan_naming_it(tmp_path: Path) -> None:
    path = _npz(tmp_path, ok=np.zeros((2, 1), np.float32),
                x=np.array([[np.nan], [np.inf]], np.float32))

    with pytest.raises(DatasetError, match=r"Array 'x' holds 1 NaN and 1 infinite"):
        value_ranges(path)
