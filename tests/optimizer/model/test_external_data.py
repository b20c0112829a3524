"""Models with external data: the check that every location stays inside the model's folder
and every range inside its file, then writing such a model (its bytes into a data file) and
saving it only once ONNX Runtime loads it from there."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.errors import InvalidModelError, UnsupportedModelError
from optimizer.model.data_file import ALIGNMENT, MIN_EXTERNAL_BYTES
from optimizer.model.file import write_model_file
from optimizer.model_check import load_checked_model
from optimizer.model_writer import save_model
from optimizer.testing.block_stack import block_stack
from optimizer.testing.passes import run_model

DATA = "model.onnx.data"


def _saved(folder: Path, model: onnx.ModelProto | None = None) -> Path:
    """block_stack saved as folder/model.onnx with its weights in folder/model.onnx.data."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model or block_stack(2, hidden=32, seed=1), path, save_as_external_data=True,
              location=DATA, size_threshold=MIN_EXTERNAL_BYTES)
    return path


def _edited(path: Path, edit: Callable[[onnx.TensorProto], None], tensor: str = "block0.w"
            ) -> Path:
    """The model at `path` with one external tensor's entries changed by `edit`."""
    model = onnx.load(path, load_external_data=False)
    edit(next(t for t in model.graph.initializer if t.name == tensor))
    onnx.save(model, path)
    return path


def _set(key: str, value: str) -> Callable[[onnx.TensorProto], None]:
    def edit(tensor: onnx.TensorProto) -> None:
        entry = next((e for e in tensor.external_data if e.key == key), None)
        if entry is None:
            entry = tensor.external_data.add()
            entry.key = key
        entry.value = value
    return edit


def _feed() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(3).standard_normal((1, 8, 32), np.float32)}


def test_a_model_with_its_data_beside_it_is_checked_without_reading_a_tensor(
        tmp_path: Path) -> None:
    path = _saved(tmp_path)

    model, summary = load_checked_model(path, external_data=True)

    external = [t for t in model.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and all(not t.raw_data for t in external)  # none read
    assert summary.external_data is not None
    [data] = summary.external_data.files
    assert (data.location, data.size) == (DATA, (tmp_path / DATA).stat().st_size)
    assert data.tensors == len(external)
    assert summary.external_data.tensor_bytes == sum(
        onnx.numpy_helper.to_array(t, base_dir=str(tmp_path)).nbytes for t in external)
    assert summary.to_dict()["external_data"]["file_bytes"] == data.size
    assert set(os.listdir(tmp_path)) == {"model.onnx", DATA}


def test_without_external_data_allowed_a_data_file_is_refused_as_an_upload_is(
        tmp_path: Path) -> None:
    with pytest.raises(UnsupportedModelError, match="an upload is a single file"):
        load_checked_model(_saved(tmp_path))


@pytest.mark.parametrize(("location", "says"), [
    ("/etc/passwd", "not a path inside the model's folder"),
    ("../outside.bin", "not a path inside the model's folder"),
    ("sub/../../outside.bin", "not a path inside the model's folder"),
    ("..\\outside.bin", "not a path inside the model's folder"),
    ("C:/weights.bin", "not a path inside the model's folder"),
    ("", "not a path inside the model's folder"),
    ("missing.bin", "not beside the model"),
])
def test_a_location_outside_the_folder_or_missing_is_refused_naming_it(
        tmp_path: Path, location: str, says: str) -> None:
    (tmp_path / "outside.bin").write_bytes(b"\0" * 8192)
    path = _edited(_saved(tmp_path / "model"), _set("location", location))

    with pytest.raises(InvalidModelError, match=says) as refused:
        load_checked_model(path, external_data=True)
    assert "block0.w" in str(refused.value) and repr(location) in str(refused.value)


def test_a_data_file_reached_through_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    folder = tmp_path / "model"
    path = _saved(folder)
    (outside / DATA).write_bytes((folder / DATA).read_bytes())
    (folder / DATA).unlink()
    (folder / DATA).symlink_to(outside / DATA)

    with pytest.raises(InvalidModelError, match="passes through the symlink"):
        load_checked_model(path, external_data=True)
    (folder / DATA).unlink()
    (folder / "weights").symlink_to(outside, target_is_directory=True)
    for tensor in ("block0.w", "block0.b"):
        _edited(path, _set("location", f"weights/{DATA}"), tensor)
    with pytest.raises(InvalidModelError, match="passes through the symlink 'weights'"):
        load_checked_model(path, external_data=True)


def test_a_location_naming_a_fifo_is_refused_before_anything_blocks_on_it(
        tmp_path: Path) -> None:
    path = _saved(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    _edited(path, _set("location", "pipe"))

    with pytest.raises(InvalidModelError, match="not a regular file"):
        load_checked_model(path, external_data=True)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("offset", "-4", "not a whole number of bytes"),
    ("length", "12e3", "not a whole number of bytes"),
    ("offset", "999999999", "truncated or not this model's"),
    ("length", "4", "its shape \\[32, 32\\] of FLOAT holds 4096"),
])
def test_an_offset_or_length_that_does_not_fit_is_refused(tmp_path: Path, key: str,
                                                         value: str, says: str) -> None:
    path = _edited(_saved(tmp_path), _set(key, value))

    with pytest.raises(InvalidModelError, match=says):
        load_checked_model(path, external_data=True)


def test_a_truncated_data_file_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    data = tmp_path / DATA
    data.write_bytes(data.read_bytes()[:-100])

    with pytest.raises(InvalidModelError, match="truncated or not this model's"):
        load_checked_model(path, external_data=True)


def test_writing_with_a_data_file_moves_large_tensors_aligned_and_leaves_the_model_whole(
        tmp_path: Path) -> None:
    model = block_stack(2, hidden=32, seed=4)
    before = model.SerializeToString()
    path = tmp_path / "out.onnx"

    write_model_file(model, path, data_location="out.onnx.data")

    assert model.SerializeToString() == before  # the caller's model keeps its bytes
    written = onnx.load(path, load_external_data=False)
    moved = {t.name: {e.key: e.value for e in t.external_data} for t in written.graph.initializer
             if t.data_location == onnx.TensorProto.EXTERNAL}
    assert set(moved) == {t.name for t in model.graph.initializer
                          if len(t.raw_data) >= MIN_EXTERNAL_BYTES}
    assert "two" not in moved  # a scalar stays in the .onnx file
    assert all(int(entries["offset"]) % ALIGNMENT == 0 for entries in moved.values())
    np.testing.assert_array_equal(run_model(onnx.load(path), _feed())[0],
                                  run_model(model, _feed())[0])


def test_tensors_already_external_are_copied_from_their_folder(tmp_path: Path) -> None:
    source = _saved(tmp_path / "source")
    model = onnx.load(source, load_external_data=False)  # tensors left in the source's file
    path = tmp_path / "copy" / "copied.onnx"
    path.parent.mkdir()

    write_model_file(model, path, data_location="copied.data", data_folder=source.parent)

    assert sorted(os.listdir(path.parent)) == ["copied.data", "copied.onnx"]
    np.testing.assert_array_equal(run_model(onnx.load(path), _feed())[0],
                                  run_model(onnx.load(source), _feed())[0])


def test_save_model_with_a_data_file_places_both_and_leaves_no_checking_folder(
        tmp_path: Path) -> None:
    model = block_stack(2, hidden=32, seed=5)
    path = tmp_path / "opt.onnx"

    save_model(model, path, what="the model", data_location="opt.onnx.data")

    assert sorted(os.listdir(tmp_path)) == ["opt.onnx", "opt.onnx.data"]
    checked, summary = load_checked_model(path, external_data=True)
    assert summary.external_data is not None and checked.graph.node


def test_save_model_that_fails_to_load_writes_neither_file(tmp_path: Path) -> None:
    model = block_stack(1, hidden=32, seed=6)
    model.graph.node[0].op_type = "NoSuchOp"

    with pytest.raises(UnsupportedModelError, match="ONNX Runtime cannot load"):
        save_model(model, tmp_path / "bad.onnx", what="the model", data_location="bad.data")

    assert os.listdir(tmp_path) == []
