"""OnnxRuntimeRunner: loads a model file, runs it, and describes itself for another process."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import Runner, RunnerSpec
from optimizer.errors import EngineBuildError, InferenceError, InternalError
from optimizer.model.tensor_specs import TensorSpec
from optimizer.testing import models


def _mlp_in_numpy(x: np.ndarray) -> np.ndarray:
    weights = {t.name: numpy_helper.to_array(t) for t in models.mlp().graph.initializer}
    hidden = np.maximum(x @ weights["fc1.w"] + weights["fc1.b"], 0)
    return hidden @ weights["fc2.w"] + weights["fc2.b"]


def test_onnx_runtime_runner_describes_inputs_and_outputs(cnn_path):
    with OnnxRuntimeRunner(cnn_path) as runner:
        assert runner.inputs == (TensorSpec("input", "float32", ("N", 3, 32, 32)),)
        assert runner.output_names == ("logits",)


def test_onnx_runtime_runner_satisfies_the_runner_protocol(mlp_path):
    with OnnxRuntimeRunner(mlp_path) as runner:
        assert isinstance(runner, Runner)


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_onnx_runtime_runner_computes_the_mlp_at_every_level(mlp_path, level):
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)

    with OnnxRuntimeRunner(mlp_path, optimization_level=level, intra_op_threads=1) as runner:
        outputs = runner.infer({"input": x})

    assert list(outputs) == ["output"]
    np.testing.assert_allclose(outputs["output"], _mlp_in_numpy(x), rtol=1e-5, atol=1e-5)


def test_onnx_runtime_runner_spec_records_how_to_recreate_it(mlp_path):
    runner = OnnxRuntimeRunner(mlp_path, optimization_level="basic", intra_op_threads=2,
                               disabled_optimizers=["GeluFusion"], flush_denormals=True)

    assert runner.spec() == RunnerSpec(
        backend="onnxruntime", model_path=str(mlp_path.resolve()),
        options={"optimization_level": "basic", "intra_op_threads": 2,
                 "disabled_optimizers": ["GeluFusion"], "flush_denormals": True})


def test_onnx_runtime_runner_reports_an_unloadable_model_as_engine_build_error(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a model")

    with pytest.raises(EngineBuildError, match="could not load model 'broken.onnx'"):
        OnnxRuntimeRunner(path)


def test_onnx_runtime_runner_reports_a_failed_run_as_inference_error(mlp_path):
    with OnnxRuntimeRunner(mlp_path) as runner:
        with pytest.raises(InferenceError, match=r"inputs input=\[2, 5\]: .*dimensions"):
            runner.infer({"input": np.zeros((2, 5), np.float32)})


def test_onnx_runtime_runner_blames_us_for_feeds_with_the_wrong_names(mlp_path):
    with OnnxRuntimeRunner(mlp_path) as runner:
        with pytest.raises(InternalError, match=r"name \['x'\], but its inputs are \['input'\]"):
            runner.infer({"x": np.zeros((2, 16), np.float32)})


def test_onnx_runtime_runner_refuses_to_infer_after_close(mlp_path):
    with OnnxRuntimeRunner(mlp_path) as runner:
        pass

    with pytest.raises(InternalError, match="used after close"):
        runner.infer({"input": np.zeros((1, 16), np.float32)})


def test_onnx_runtime_runner_rejects_an_unknown_optimization_level(mlp_path):
    with pytest.raises(InternalError, match="'fastest'; expected one of disabled, basic"):
        OnnxRuntimeRunner(mlp_path, optimization_level="fastest")  # type: ignore[arg-type]
