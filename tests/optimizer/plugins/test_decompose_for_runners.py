"""The one place ONNX Runtime meets plugin nodes: models are decomposed just before a session.

`runnable_in_onnxruntime` decomposes a model only when it imports the fuseforge domain;
`runner_for_model` (the in-memory ORT runner every CPU tool uses) and `IntermediateReader` run
plugin graphs through it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner, runner_for_model
from optimizer.plugins import DOMAIN
from optimizer.plugins.decompose import runnable_in_onnxruntime
from optimizer.testing.models import mlp
from optimizer.validation.intermediates import intermediate_values
from tests.optimizer.plugins.support import plugin_chain, plugin_chain_output


def test_a_model_without_plugins_is_returned_as_it_is() -> None:
    model = mlp()
    assert runnable_in_onnxruntime(model) is model


def test_a_plugin_model_is_decomposed_into_a_new_model() -> None:
    model = plugin_chain()
    before = model.SerializeToString()

    decomposed = runnable_in_onnxruntime(model)

    assert model.SerializeToString() == before
    assert {n.domain for n in decomposed.graph.node} == {""}
    assert DOMAIN not in {o.domain for o in decomposed.opset_import}


def test_runner_for_model_runs_plugin_nodes_and_removes_its_file() -> None:
    model = plugin_chain()
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)

    with runner_for_model(model) as runner:
        assert isinstance(runner, OnnxRuntimeRunner)
        path = Path(runner.spec().model_path)
        assert runner.spec().options["optimization_level"] == "disabled"
        y = runner.infer({"x": x})["y"]
        assert not any(n.domain == DOMAIN for n in onnx.load(path).graph.node)

    np.testing.assert_allclose(y, plugin_chain_output(model, x), atol=1e-5)
    assert not path.exists()


def test_runner_for_model_passes_its_options_on() -> None:
    with runner_for_model(mlp(), optimization_level="all", intra_op_threads=1) as runner:
        assert runner.spec().options["optimization_level"] == "all"
        assert runner.spec().options["intra_op_threads"] == 1


def test_plugin_outputs_and_their_inputs_can_be_read_as_intermediates() -> None:
    model = plugin_chain()
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)

    (values,) = intermediate_values(model, ["h", "y"], [{"x": x}])

    np.testing.assert_allclose(values["y"], plugin_chain_output(model, x), atol=1e-5)
    relu = np.maximum(x, 0)
    np.testing.assert_array_less(0, np.abs(values["h"] - relu).max())  # GELU(relu + b), not relu
