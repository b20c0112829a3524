"""`fuseforge optimize --precision int8`: a job's int8 step on a local file: calibrated on an
.npz, judged on samples held apart from it, and written only when within budget and faster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fuseforge_cli.main import main
from optimizer.testing.quantization_models import calibration_images, conv_stack


@pytest.fixture
def convnet(tmp_path: Path) -> tuple[Path, Path]:
    model = conv_stack(seed=21)
    path, data = tmp_path / "convnet.onnx", tmp_path / "calib.npz"
    onnx.save(model, path)
    np.savez(data, input=calibration_images(model, 10, seed=4))
    return path, data


def test_int8_with_a_calibration_file_writes_a_quantized_model_and_says_what_it_did(
        convnet: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, data = convnet
    out = tmp_path / "int8.onnx"

    code = main(["optimize", str(path), "-o", str(out), "--precision", "int8",
                 "--calibration", str(data), "--quantization-mode", "static",
                 "--calibration-method", "minmax", "--json"])

    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    quantization = printed["quantization"]
    assert quantization["calibrations"][0]["samples"] == 8  # 2 of 10 held apart to judge
    written = onnx.load(out)
    qdq = sum(node.op_type == "QuantizeLinear" for node in written.graph.node)
    assert (qdq > 0) == (quantization["shipped"] == "int8"), quantization["why"]
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--precision", "int8", "--quantization-mode", "static"], "needs --calibration"),
    (["--calibration", "x.npz"], "go with a quantized --precision (int8)"),
    (["--precision", "int8", "--backend", "tensorrt"], "ONNX Runtime (backend onnxruntime)"),
])
def test_int8_usage_errors_exit_3_and_write_nothing(
        convnet: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extra: list[str], message: str) -> None:
    out = tmp_path / "int8.onnx"
    assert main(["optimize", str(convnet[0]), "-o", str(out), *extra]) == 3
    assert message in capsys.readouterr().err
    assert not out.exists()
