"""Engines flush denormals to zero while they run, on the calling thread only, and only then."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.backends.onnxruntime.build import OrtBuildOptions, build_ort_engine, runner_for_engine
from optimizer.backends.onnxruntime.denormals import (
    denormals_flushed,
    flushing_supported,
    thread_flushes_denormals,
)
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner

pytestmark = pytest.mark.skipif(
    not flushing_supported(), reason="denormal flushing needs x86-64 or AArch64 Linux (glibc)")

DENORMAL = np.float32(1e-39)  # below float32's smallest normal, 1.18e-38


def tiny_product_model() -> onnx.ModelProto:
    """y = x * 1e-30: for x near 1e-9 the product is a denormal (about 1e-39)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        "tiny_product",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        initializer=[helper.make_tensor("scale", TensorProto.FLOAT, [], [1e-30])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def feeds() -> dict[str, np.ndarray]:
    x = np.full((4, 64), 1e-9, np.float32)
    x[:2] = 1.0  # products 1e-30: normal, kept either way
    return {"x": x}


def test_the_block_flushes_denormals_and_the_thread_gets_its_state_back() -> None:
    assert DENORMAL + np.float32(0) > 0  # gradual underflow outside

    with denormals_flushed():
        assert thread_flushes_denormals()
        assert DENORMAL + np.float32(0) == 0

    assert not thread_flushes_denormals()
    assert DENORMAL + np.float32(0) > 0


def test_a_disabled_block_changes_nothing() -> None:
    with denormals_flushed(enabled=False):
        assert not thread_flushes_denormals()


def test_an_engine_flushes_denormal_results_and_the_plain_runner_does_not(tmp_path) -> None:
    source = tmp_path / "model.onnx"
    onnx.save(tiny_product_model(), source)
    engine = build_ort_engine(source, tmp_path / "engine", input_shapes={},
                              options=OrtBuildOptions(flush_denormals=True))
    assert engine.manifest["flush_denormals"] is True

    with runner_for_engine(engine.manifest_path) as flushing, OnnxRuntimeRunner(source) as plain:
        flushed = flushing.infer(feeds())["y"]
        gradual = plain.infer(feeds())["y"]

    assert np.all(flushed[2:] == 0)
    assert np.all(gradual[2:] > 0) and np.all(gradual[2:] < 1.2e-38)  # denormals
    np.testing.assert_array_equal(flushed[:2], gradual[:2])
    assert not thread_flushes_denormals()  # the run gave the thread its state back


def test_an_engine_built_without_flushing_keeps_gradual_underflow(tmp_path) -> None:
    source = tmp_path / "model.onnx"
    onnx.save(tiny_product_model(), source)
    engine = build_ort_engine(source, tmp_path / "engine", input_shapes={},
                              options=OrtBuildOptions(flush_denormals=False))

    with runner_for_engine(engine.manifest_path) as runner:
        y = runner.infer(feeds())["y"]

    assert engine.manifest["flush_denormals"] is False
    assert np.all(y[2:] > 0)


def test_the_first_session_of_a_process_leaves_the_creating_thread_as_it_was(tmp_path) -> None:
    # ONNX Runtime applies the first session's set_denormal_as_zero to the creating thread for
    # good; the runner must undo that, or every later run on the thread (the original model's
    # timing included) would flush too.
    source = tmp_path / "model.onnx"
    onnx.save(tiny_product_model(), source)
    script = textwrap.dedent(f"""
        from optimizer.backends.onnxruntime.denormals import thread_flushes_denormals
        from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
        OnnxRuntimeRunner({str(source)!r}, flush_denormals=True)
        print(thread_flushes_denormals())
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "False"


def softmax_model(masked: bool) -> onnx.ModelProto:
    """Softmax(x [+ mask]): transformers' attention scores, masked or not."""
    nodes = [helper.make_node("Softmax", ["scores" if masked else "x"], ["y"], axis=-1)]
    if masked:
        nodes.insert(0, helper.make_node("Add", ["x", "mask"], ["scores"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 64]))
    graph = helper.make_graph(nodes, "softmax", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(("model", "flushes"), [
    (lambda: softmax_model(masked=True), True),
    (lambda: softmax_model(masked=False), False),
    (tiny_product_model, False),
])
def test_by_default_an_engine_flushes_only_where_it_softmaxes_masked_scores(tmp_path, model,
                                                                             flushes):
    source = tmp_path / "model.onnx"
    onnx.save(model(), source)

    engine = build_ort_engine(source, tmp_path / "engine", input_shapes={},
                              options=OrtBuildOptions())

    assert engine.manifest["flush_denormals"] is flushes
    assert ("applies a mask" in engine.manifest["flush_denormals_why"]) is flushes
