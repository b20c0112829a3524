"""`fuseforge optimize`: the job's passes, locally, with a report and clear errors."""

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from fuseforge_cli.main import main
from optimizer.testing.models import small_cnn
from optimizer.testing.passes import op_types, run_model
from tests.optimizer.passes.test_fuse_layer_norm import layer_norm


@pytest.fixture
def cnn_path(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=2), path)
    return path


def test_optimize_writes_fused_model_and_report(cnn_path: Path, tmp_path: Path) -> None:
    out, report_path = tmp_path / "fused.onnx", tmp_path / "report.json"
    code = main(["optimize", str(cnn_path), "-o", str(out), "--input-shape", "input=2,3,32,32",
                 "--report", str(report_path)])
    assert code == 0
    fused = onnx.load(out)
    assert "BatchNormalization" not in op_types(fused)
    report = json.loads(report_path.read_text())
    assert report["ops_before"]["BatchNormalization"] == 2
    assert "BatchNormalization" not in report["ops_after"]
    feed = {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32), np.float32)}
    np.testing.assert_allclose(run_model(fused, feed)[0], run_model(onnx.load(cnn_path), feed)[0],
                               atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
def test_optimize_says_it_converted_an_opset_13_layer_norm_model_to_17(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    path, out = tmp_path / "ln13.onnx", tmp_path / "fused.onnx"
    onnx.save(layer_norm(opset=13), path)
    assert main(["optimize", str(path), "-o", str(out), "--backend", backend]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"FuseLayerNorm +applied 1\n", printed), printed
    assert "note: upgrade_opset_for_layer_norm: converted the model from opset 13 to 17" in printed
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_optimize_with_passes_none_changes_nothing(cnn_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "same.onnx"
    assert main(["optimize", str(cnn_path), "-o", str(out), "--passes", "none"]) == 0
    assert op_types(onnx.load(out)) == op_types(onnx.load(cnn_path))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--passes", "no_such_pass"], "unknown pass(es) 'no_such_pass'"),
        (["--input-shape", "input=2,3"], "rank 4"),
        (["--input-shape", "image=1,3,32,32"], "image"),
    ],
)
def test_optimize_reports_bad_arguments_with_exit_3_and_writes_nothing(
    cnn_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(cnn_path), "-o", str(out), *extra]) == 3  # bad usage
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_optimize_refuses_a_file_that_is_not_a_model_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01not a model")
    assert main(["optimize", str(bad), "-o", str(tmp_path / "o.onnx")]) == 1  # model refused
    assert "InvalidModelError" in capsys.readouterr().err
