"""`fuseforge optimize`: the job's passes, locally, with a report and clear errors."""

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from fuseforge_cli.main import main
from optimizer.testing.models import small_cnn
from optimizer.testing.norm_models import layer_norm
from optimizer.testing.passes import op_types, run_model
from optimizer.testing.shape_models import lstm_in_a_loop, lstm_in_nested_ifs, strided_convnet


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


def test_optimize_takes_a_minus_one_batch_with_or_without_input_shapes(tmp_path: Path) -> None:
    model_path, out = tmp_path / "paddle.onnx", tmp_path / "out.onnx"
    onnx.save(strided_convnet([-1, 3, 48, 192], seed=6), model_path)
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)}
    expected = run_model(onnx.load(model_path), feed)[0]

    for shapes in ([], ["--input-shape", "x=1,3,48,192"]):
        assert main(["optimize", str(model_path), "-o", str(out), *shapes]) == 0
        np.testing.assert_allclose(run_model(onnx.load(out), feed)[0], expected, rtol=1e-4,
                                   atol=1e-4)


def test_optimize_refuses_image_dims_at_one_with_the_shapes_to_give(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_path, out = tmp_path / "convnet.onnx", tmp_path / "out.onnx"
    onnx.save(strided_convnet(["N", 3, "H", "W"]), model_path)

    assert main(["optimize", str(model_path), "-o", str(out), "--input-shape", "x=1,3,1,1"]) == 3

    err = capsys.readouterr().err
    assert "InputShapeError" in err and "--input-shape x=1,3,224,224" in err
    assert not out.exists()


@pytest.mark.parametrize("passes", ["none", "all"])
def test_optimize_refuses_fixed_shapes_that_onnx_runtime_cannot_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], passes: str) -> None:
    # The unused 8 kHz network sits in a Loop body, which FuseForge leaves as it is.
    model_path, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    onnx.save(lstm_in_a_loop(), model_path)

    code = main(["optimize", str(model_path), "-o", str(out), "--input-shape", "input=1,16",
                 "--input-shape", "state=2,1,16", "--passes", passes])

    assert code == 1  # the model is refused
    err = capsys.readouterr().err
    assert "UnsupportedModelError: ONNX Runtime cannot load" in err
    assert "First input tensor must have rank 3" in err
    assert not out.exists()


@pytest.mark.parametrize("passes", ["none", "all"])
def test_optimize_fixes_the_shapes_of_a_model_whose_unused_if_branch_cannot_run_there(
        tmp_path: Path, passes: str) -> None:
    # silero-vad's case: the 8 kHz branch cannot run at rank-2 shapes; it keeps dynamic shapes
    # (optimizer/model/dead_branches.py), and the model is written at the shapes asked for.
    model_path, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    onnx.save(lstm_in_nested_ifs(seed=5), model_path)

    assert main(["optimize", str(model_path), "-o", str(out), "--input-shape", "input=1,16",
                 "--input-shape", "state=2,1,16", "--passes", passes]) == 0

    written = onnx.load(out)
    assert [[d.dim_value for d in value.type.tensor_type.shape.dim]
            for value in written.graph.input] == [[1, 16], [2, 1, 16], []]
    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((1, 16)).astype(np.float32),
             "state": rng.standard_normal((2, 1, 16)).astype(np.float32),
             "sr": np.array(16000, np.int64)}
    for got, want in zip(run_model(written, feeds), run_model(onnx.load(model_path), feeds),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_optimize_keeps_the_recurrent_model_loadable_with_dynamic_inputs(tmp_path: Path) -> None:
    model_path, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    onnx.save(lstm_in_nested_ifs(), model_path)

    assert main(["optimize", str(model_path), "-o", str(out), "--passes", "none"]) == 0

    feeds = {"input": np.ones((1, 16), np.float32), "state": np.zeros((2, 1, 16), np.float32),
             "sr": np.array(16000, np.int64)}
    np.testing.assert_allclose(run_model(onnx.load(out), feeds)[0],
                               run_model(onnx.load(model_path), feeds)[0], rtol=1e-5, atol=1e-6)


def test_optimize_inlines_the_recurrent_model_once_its_sample_rate_is_a_constant(
        tmp_path: Path) -> None:
    # With "sr" an input, the 8 kHz branch is fed rank 4 at these shapes and fails whenever it
    # runs (as silero-vad's 8 kHz branch does at 512 samples), so it keeps dynamic shapes
    # (test above). A model specialised to 16 kHz (sr an initializer) folds completely:
    # cleanup inlines If(sr == 16000) and then the rank checks inside it.
    model = lstm_in_nested_ifs(seed=3)
    model.graph.input.remove(next(v for v in model.graph.input if v.name == "sr"))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(16000, np.int64), "sr"))
    model_path, out = tmp_path / "vad16k.onnx", tmp_path / "out.onnx"
    onnx.save(model, model_path)

    assert main(["optimize", str(model_path), "-o", str(out), "--input-shape", "input=1,16",
                 "--input-shape", "state=2,1,16"]) == 0

    fused = onnx.load(out)
    assert "If" not in op_types(fused) and "LSTM" in op_types(fused)
    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((1, 16)).astype(np.float32),
             "state": rng.standard_normal((2, 1, 16)).astype(np.float32)}
    for got, want in zip(run_model(fused, feeds), run_model(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_optimize_leaves_code_in_open_if_branches_unfolded_so_the_model_still_loads(
        tmp_path: Path) -> None:
    # The rank check Size(Shape(input)) sits inside If(sr == 16000)'s branches. Folding it there
    # (the rank is declared) made ONNX Runtime inline the inner Ifs at load and type-check the
    # 8 kHz LSTM with a rank-4 input, so the optimized model could not load: first written with
    # exit 0, then refused. Code in branches of an If whose condition is not constant is no
    # longer folded, so the model is written and computes what the original does.
    model_path, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    onnx.save(lstm_in_nested_ifs(), model_path)

    assert main(["optimize", str(model_path), "-o", str(out)]) == 0

    feeds = {"input": np.ones((1, 16), np.float32), "state": np.zeros((2, 1, 16), np.float32),
             "sr": np.array(16000, np.int64)}
    np.testing.assert_allclose(run_model(onnx.load(out), feeds)[0],
                               run_model(onnx.load(model_path), feeds)[0], rtol=1e-5, atol=1e-6)
