"""Every failure of `fuseforge optimize` and `fuseforge validate` is one line on stderr with a
documented exit code (fuseforge_cli/failures.py), and --json prints one JSON object even then."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseforge_cli.main import main
from optimizer.testing.models import IR_VERSION, OPSET, small_cnn

REPO = Path(__file__).resolve().parents[2]


def _fuseforge(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environment.pop("FUSEFORGE_LOG_LEVEL", None) if env is None else None
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", *args], capture_output=True,
                          text=True, env=environment, cwd=REPO, timeout=300)


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    return err


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=2), path)
    return path


@pytest.fixture
def embedding(tmp_path: Path) -> Path:
    """ids int64 [1, 6] -> Gather from a 5-row table."""
    table = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["vectors"], axis=0)], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, [1, 6, 4])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    path = tmp_path / "embedding.onnx"
    onnx.save(model, path)
    return path


def test_a_missing_model_is_one_line_exit_3_and_a_json_object(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.onnx"

    run = _fuseforge("validate", str(missing), str(missing), "--json")

    assert run.returncode == 3
    err = _one_line(run.stderr)
    assert err.startswith("fuseforge validate: FileNotFound: original model file ")
    assert "does not exist; check the path." in err
    assert json.loads(run.stdout) == {
        "error": "FileNotFound", "exit_code": 3,
        "detail": f"original model file {str(missing)!r} does not exist; check the path."}


def test_an_onnx_runtime_failure_is_one_line_without_the_runtimes_own_log(
        embedding: Path) -> None:
    # Ids past the 5-row table: ONNX Runtime refuses the Gather (and would log it itself too).
    run = _fuseforge("validate", str(embedding), str(embedding), "--input-range", "ids=0,9",
                     "--json")

    assert run.returncode == 1
    err = _one_line(run.stderr)
    assert err.startswith("fuseforge validate: InferenceError: ONNX Runtime failed to run model")
    assert "out of data bounds" in err
    assert json.loads(run.stdout)["error"] == "InferenceError"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.onnx"

    run = _fuseforge("optimize", str(missing), "-o", str(tmp_path / "out.onnx"), "--debug")

    assert run.returncode == 3
    assert "Traceback" in run.stderr
    assert run.stderr.splitlines()[-1].startswith("fuseforge optimize: FileNotFound:")


def _failure(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, dict]:
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    _one_line(captured.err)
    answer = json.loads(captured.out)
    assert answer["exit_code"] == code
    return code, captured.err, answer


@pytest.mark.parametrize("command", ["optimize", "validate"])
def test_a_file_that_is_not_a_model_is_refused_with_exit_1(
        command: str, tmp_path: Path, cnn: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01not a model")
    argv = ["optimize", str(bad), "-o", str(tmp_path / "o.onnx")] if command == "optimize" \
        else ["validate", str(cnn), str(bad)]

    code, err, answer = _failure(capsys, argv)

    assert code == 1 and answer["error"] == "InvalidModelError"
    assert err.startswith(f"fuseforge {command}: InvalidModelError: Model file 'bad.onnx'")


def test_a_directory_given_as_the_model_is_unreadable_with_exit_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, answer = _failure(capsys, ["optimize", str(tmp_path), "-o", str(tmp_path / "o")])

    assert (code, answer["error"]) == (3, "FileUnreadable")
    assert "is not a regular file" in err


def test_a_model_of_an_unknown_domain_is_refused_with_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph(
        [helper.make_node("Mystery", ["x"], ["y"], domain="com.example")], "refused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = IR_VERSION
    path = tmp_path / "mystery.onnx"
    onnx.save(model, path)

    code, err, answer = _failure(capsys, ["optimize", str(path), "-o", str(tmp_path / "o.onnx")])

    assert (code, answer["error"]) == (1, "UnsupportedModelError")
    assert "com.example" in err


@pytest.mark.parametrize(
    ("extra", "wanted"),
    [
        (["--input-shape", "input"], "expected NAME=D1,D2,..."),
        (["--input-shape", "input=1,x,32,32"], "expected NAME=D1,D2,..."),
        (["--input-range", "input=0"], "expected NAME=LOW,HIGH"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_malformed_options_are_bad_usage_with_exit_3(
        extra: list[str], wanted: str, cnn: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, answer = _failure(capsys, ["validate", str(cnn), str(cnn), *extra])

    assert (code, answer["error"]) == (3, "UsageError")
    assert wanted in err and "--help`." in err


def test_an_input_shape_the_model_refuses_is_bad_usage_with_exit_3(
        cnn: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, answer = _failure(capsys, ["optimize", str(cnn), "-o", str(tmp_path / "o.onnx"),
                                          "--input-shape", "input=1,3"])

    assert (code, answer["error"]) == (3, "InputShapeError")
    assert "rank 4" in err


def test_an_output_that_cannot_be_written_is_bad_usage_with_exit_3(
        cnn: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no_such_folder" / "out.onnx"

    code, err, answer = _failure(capsys, ["optimize", str(cnn), "-o", str(out)])

    assert (code, answer["error"]) == (3, "OutputUnwritable")
    assert "give a path in a writable folder" in err


def test_optimize_json_is_one_object_on_success(cnn: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(cnn), "-o", str(tmp_path / "o.onnx"), "--json"]) == 0

    answer = json.loads(capsys.readouterr().out)
    assert answer["exit_code"] == 0 and answer["report"]["nodes_after"] > 0


def test_the_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("optimize", "validate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "exit codes:" in out and "3  bad usage" in out
