"""`fuseforge submit` checks its datasets and input options against the model on this machine
before it uploads anything: these runs point it at a port where no server listens, so exit 3
with the reason proves the check ran first, and exit 4 (unreachable) that it let a good job by."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.testing.models import small_cnn
from optimizer.testing.shape_models import lstm_in_nested_ifs

REPO = Path(__file__).resolve().parents[2]
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers


def _submit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL=NOWHERE)
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "submit", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


@pytest.fixture
def cnn(tmp_path: Path) -> str:
    path = tmp_path / "cnn.onnx"  # input "input": [N, 3, 32, 32] float32
    onnx.save(small_cnn(seed=1), path)
    return str(path)


def _npz(tmp_path: Path, name: str, **arrays: np.ndarray) -> str:
    path = tmp_path / name
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return str(path)


def test_a_calibration_set_without_the_batch_dim_is_refused_before_the_upload(
        cnn: str, tmp_path: Path) -> None:
    data = _npz(tmp_path, "calib.npz", input=np.zeros((4, 3, 32, 32), np.float32))

    run = _submit(cnn, "--precision", "int8", "--calibration", data)

    assert run.returncode == 3, run.stderr
    [line] = run.stderr.splitlines()  # not even the server line: nothing was asked of it
    assert line.startswith("fuseforge submit: DatasetError: --calibration calib.npz: array "
                           "'input' holds samples of shape [3, 32, 32]")
    assert "batch dim included" in line and "[4, 1, 3, 32, 32]" in line
    assert line.endswith("(model 'cnn.onnx'; checked here: nothing was uploaded)")


@pytest.mark.parametrize(("array", "found"), [
    ({"image": np.zeros((2, 1, 3, 32, 32), np.float32)}, "no array for input(s) 'input'"),
    ({"input": np.zeros((2, 1, 3, 32, 32), np.float64)}, "is float64 but model input 'input' "
                                                         "takes float32"),
])
def test_a_validation_set_with_other_names_or_dtypes_is_refused_before_the_upload(
        cnn: str, tmp_path: Path, array: dict[str, np.ndarray], found: str) -> None:
    run = _submit(cnn, "--validation", _npz(tmp_path, "val.npz", **array))

    assert run.returncode == 3, run.stderr
    assert "DatasetError: --validation val.npz" in run.stderr and found in run.stderr


def test_a_dataset_that_fits_goes_on_to_the_server(cnn: str, tmp_path: Path) -> None:
    data = _npz(tmp_path, "val.npz", input=np.zeros((2, 1, 3, 32, 32), np.float32))

    run = _submit(cnn, "--validation", data, "--input-range", "input=0,1")

    assert run.returncode == 4, run.stderr  # checked, then no server answered
    assert f"FuseForge server {NOWHERE} (FUSEFORGE_URL)" in run.stderr


def test_input_options_for_inputs_the_model_lacks_are_refused_naming_the_flag(
        cnn: str) -> None:
    shape = _submit(cnn, "--input-shape", "image=1,3,32,32")
    assert shape.returncode == 3, shape.stderr
    assert "InputShapeError: model 'cnn.onnx': input_shapes.image:" in shape.stderr
    assert "(input_shapes comes from --input-shape or --config)" in shape.stderr


def test_a_fractional_range_for_an_integer_control_input_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vad.onnx"  # "sr": an int64 scalar, as silero-vad's sample rate
    onnx.save(lstm_in_nested_ifs(), path)

    run = _submit(str(path), "--input-range", "sr=0.5,3")

    assert run.returncode == 3, run.stderr
    assert "InputRangeError: model 'vad.onnx': input_ranges.sr: input 'sr' is int64" in run.stderr
    assert "(input_ranges comes from --input-range or --config)" in run.stderr
