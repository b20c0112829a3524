"""build_ort_engine: a portable optimized model plus a manifest, which runner_for_engine loads."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.backends.onnxruntime.build import (
    MEASURED_ON_ORT,
    SLOWER_ORT_FUSIONS,
    OrtBuildOptions,
    build_ort_engine,
    runner_for_engine,
)
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import EngineBuildError, InputShapeError, InternalError
from optimizer.model.graphs import iter_nodes, op_histogram
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.testing import models
from optimizer.validation import default_tolerances, validate

SHAPES = {"input": [2, 3, 32, 32]}


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_build_ort_engine_output_matches_the_original_at_every_level(cnn_path, tmp_path, level):
    engine = build_ort_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                              options=OrtBuildOptions(optimization_level=level))
    feeds = random_feeds([TensorSpec("input", "float32", (2, 3, 32, 32))], count=2, seed=0)

    with OnnxRuntimeRunner(cnn_path) as original, runner_for_engine(engine.model_path.parent) \
            as optimized:
        report = validate(original, optimized, feeds, default_tolerances("fp32"))

    assert report.passed, report.to_dict()
    onnx.checker.check_model(onnx.load(engine.model_path))


@pytest.mark.parametrize(("requested", "saved"), [
    ("disabled", "disabled"), ("basic", "basic"), ("extended", "extended"), ("all", "extended")])
def test_build_ort_engine_manifest_records_how_the_engine_was_saved_and_loads(
        cnn_path, tmp_path, requested, saved):
    engine = build_ort_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                              options=OrtBuildOptions(optimization_level=requested))

    manifest = json.loads(engine.manifest_path.read_text())
    assert manifest == engine.manifest
    assert manifest["backend"] == "onnxruntime"
    assert manifest["providers"] == ["CPUExecutionProvider"]
    assert manifest["onnxruntime_version"]
    assert manifest["requested_optimization_level"] == requested
    assert manifest["saved_optimization_level"] == saved
    assert manifest["load_optimization_level"] == requested
    assert manifest["input_shapes"] == SHAPES
    assert engine.model_path == engine.manifest_path.parent / manifest["engine_file"]


def test_build_ort_engine_at_level_all_saves_no_cpu_specific_layout_ops(cnn_path, tmp_path):
    engine = build_ort_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                              options=OrtBuildOptions(optimization_level="all"))

    domains = {node.domain for node in iter_nodes(onnx.load(engine.model_path))}
    assert "com.microsoft.nchwc" not in domains
    with runner_for_engine(engine.manifest_path) as runner:
        assert runner.optimization_level == "all"


def test_build_ort_engine_manifest_histograms_show_the_fusions(cnn_path, tmp_path):
    engine = build_ort_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                              options=OrtBuildOptions(optimization_level="extended"))

    source, saved = engine.manifest["source_model"], engine.manifest["engine_model"]
    assert source["node_count"] == 10 and source["op_histogram"]["BatchNormalization"] == 2
    assert "BatchNormalization" not in saved["op_histogram"]
    assert saved["node_count"] == sum(saved["op_histogram"].values()) < source["node_count"]


def test_build_ort_engine_fixes_the_requested_input_shapes(cnn_path, tmp_path):
    engine = build_ort_engine(cnn_path, tmp_path / "engine", input_shapes={},
                              options=OrtBuildOptions(optimization_level="basic"))

    with runner_for_engine(engine.model_path.parent) as runner:
        assert runner.inputs[0].shape == (1, 3, 32, 32)
    assert engine.manifest["input_shapes"] == {"input": [1, 3, 32, 32]}


def test_build_ort_engine_rejects_shapes_that_do_not_fit(cnn_path, tmp_path):
    with pytest.raises(InputShapeError, match="axis 1 is fixed at 3"):
        build_ort_engine(cnn_path, tmp_path / "engine", input_shapes={"input": [1, 4, 32, 32]},
                         options=OrtBuildOptions())


def test_build_ort_engine_reports_an_op_ort_lacks_as_engine_build_error(tmp_path):
    model = models.mlp()
    model.graph.node[2].op_type, model.graph.node[2].domain = "FancyRelu", "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)

    with pytest.raises(EngineBuildError, match="could not optimize model 'custom.onnx'.*FancyRelu"):
        build_ort_engine(path, tmp_path / "engine", input_shapes={}, options=OrtBuildOptions())


def test_runner_for_engine_blames_us_for_a_missing_manifest(tmp_path):
    with pytest.raises(InternalError, match="manifest .* is missing or malformed"):
        runner_for_engine(tmp_path)


def _add_layer_norm_model(path):
    rng = np.random.default_rng(3)
    hidden = 64
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "skip"], ["sum"]),
         helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1)],
        "add_ln",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 8, hidden])
         for name in ("x", "skip")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, hidden])],
        initializer=[
            numpy_helper.from_array(rng.uniform(0.5, 1.5, hidden).astype(np.float32), "gamma"),
            numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "beta"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_build_ort_engine_keeps_slower_ort_fusions_out_and_says_why(tmp_path):
    source = _add_layer_norm_model(tmp_path / "add_ln.onnx")

    default = build_ort_engine(source, tmp_path / "default", options=OrtBuildOptions(),
                               input_shapes={})
    everything = build_ort_engine(source, tmp_path / "everything",
                                  options=OrtBuildOptions(disabled_optimizers=()),
                                  input_shapes={})

    assert "com.microsoft.SkipLayerNormalization" not in op_histogram(onnx.load(default.model_path))
    assert "com.microsoft.SkipLayerNormalization" in op_histogram(onnx.load(everything.model_path))
    reason = default.manifest["disabled_optimizers"]["SkipLayerNormFusion"]
    assert reason == SLOWER_ORT_FUSIONS["SkipLayerNormFusion"]  # the manifest says why
    assert f"ORT {MEASURED_ON_ORT}'s" in reason
    with runner_for_engine(default.manifest_path) as runner:
        assert runner.disabled_optimizers == ("SkipLayerNormFusion",)


def test_the_installed_onnx_runtime_is_the_release_the_decisions_were_measured_on() -> None:
    # The passes' off-by-default choices, SLOWER_ORT_FUSIONS and the int8 flavours hold for
    # the release they were measured on: another one must be measured again (bench/) before
    # pyproject.toml's pin and MEASURED_ON_ORT move to it.
    installed = ".".join(ort.__version__.split(".")[:2])
    assert installed == MEASURED_ON_ORT, (
        f"onnxruntime {ort.__version__} is installed; the measured decisions hold for "
        f"{MEASURED_ON_ORT}: rerun bench/fuse_norm_gelu.py, bench/fusion.py and "
        "bench/quantize.py on it first")
