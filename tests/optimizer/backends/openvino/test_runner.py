"""OpenVinoRunner: the Runner interface on OpenVINO's CPU plugin, recreated from its spec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.openvino.runner import OpenVinoRunner, compile_options
from optimizer.backends.runner import Runner, runner_from_spec
from optimizer.errors import EngineBuildError, InternalError
from optimizer.registries.precisions import Precision
from tests.support.host_cpu import needs_cpu_for


def _feed() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32), np.float32)}


def test_runner_runs_an_onnx_file_as_onnx_runtime_does_in_fp32(cnn_path: Path) -> None:
    with OpenVinoRunner(cnn_path, inference_precision="f32", threads=1) as runner, \
            OnnxRuntimeRunner(cnn_path) as reference:
        assert isinstance(runner, Runner)
        got, want = runner.infer(_feed())["logits"], reference.infer(_feed())["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_runner_outputs_are_copies_a_later_run_does_not_overwrite(cnn_path: Path) -> None:
    with OpenVinoRunner(cnn_path) as runner:
        first = runner.infer(_feed())["logits"]
        kept = first.copy()
        runner.infer({"input": np.zeros((2, 3, 32, 32), np.float32)})
    np.testing.assert_array_equal(first, kept)


@pytest.mark.parametrize("precision", [
    "f32", pytest.param("bf16", marks=needs_cpu_for(Precision.BF16))])
def test_runner_spec_recreates_the_same_runner(cnn_path: Path, precision: str) -> None:
    with OpenVinoRunner(cnn_path, inference_precision=precision, threads=2) as runner:
        spec = runner.spec()
        expected = runner.infer(_feed())["logits"]
    assert spec.backend == "openvino"
    with runner_from_spec(spec) as again:
        assert isinstance(again, OpenVinoRunner)
        assert (again.inference_precision, again.threads) == (precision, 2)
        np.testing.assert_array_equal(again.infer(_feed())["logits"], expected)


def test_runner_refuses_feeds_that_do_not_name_its_inputs(cnn_path: Path) -> None:
    with OpenVinoRunner(cnn_path) as runner, pytest.raises(InternalError, match="'input'"):
        runner.infer({"pixels": _feed()["input"]})


def test_runner_refuses_use_after_close(cnn_path: Path) -> None:
    runner = OpenVinoRunner(cnn_path)
    runner.close()
    runner.close()
    with pytest.raises(InternalError, match="after close"):
        runner.infer(_feed())


def test_runner_names_the_file_it_cannot_compile(tmp_path: Path) -> None:
    missing = tmp_path / "missing.xml"
    with pytest.raises(EngineBuildError, match="missing.xml"):
        OpenVinoRunner(missing)


@pytest.mark.parametrize(("precision", "threads"), [("f16", None), ("f32", 0)])
def test_compile_options_refuse_what_openvino_runner_does_not_use(precision: str,
                                                                   threads: int | None) -> None:
    with pytest.raises(InternalError):
        compile_options(precision, threads)


def test_compile_options_always_set_the_precision_and_the_latency_hint() -> None:
    assert compile_options("f32", None) == {"INFERENCE_PRECISION_HINT": "f32",
                                            "PERFORMANCE_HINT": "LATENCY"}
    assert compile_options("bf16", 2, profiling=True)["INFERENCE_NUM_THREADS"] == 2
