"""What OpenVINO's CPU plugin made of a model, layer by layer: the precision each layer runs at,
its time from the performance counters, and the ONNX nodes it computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.backends.openvino.build import OvBuildOptions, build_ov_engine, runner_for_engine
from optimizer.backends.openvino.layers import (
    ir_node_origins,
    layer_nodes,
    layer_times,
    runtime_layers,
)
from optimizer.errors import InternalError
from optimizer.registries.precisions import Precision
from tests.support.host_cpu import needs_cpu_for

FEED = {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32), np.float32)}


def _engine(cnn_path: Path, tmp_path: Path, precision: Precision = Precision.FP32) -> Path:
    return build_ov_engine(cnn_path, tmp_path / "engine", input_shapes={"input": [2, 3, 32, 32]},
                           options=OvBuildOptions(precision=precision)).manifest_path


@pytest.mark.parametrize(("precision", "computed_at"), [
    (Precision.FP32, "f32"), pytest.param(Precision.BF16, "bf16", marks=needs_cpu_for(Precision.BF16))])
def test_each_compute_layer_reports_the_precision_it_runs_at(
        cnn_path: Path, tmp_path: Path, precision: Precision, computed_at: str) -> None:
    with runner_for_engine(_engine(cnn_path, tmp_path, precision)) as runner:
        layers = runtime_layers(runner.compiled)
    convolutions = [layer for layer in layers if layer.layer_type == "Convolution"]
    assert len(convolutions) == 2
    assert {layer.precision for layer in convolutions} == {computed_at}


def test_every_layer_is_traced_to_the_onnx_nodes_it_computes(cnn_path: Path,
                                                             tmp_path: Path) -> None:
    manifest = _engine(cnn_path, tmp_path)
    graph = onnx.load(cnn_path).graph
    with runner_for_engine(manifest) as runner:
        layers = runtime_layers(runner.compiled)
    traced = layer_nodes(layers, ir_node_origins(manifest.parent / "engine.xml", graph))

    names = {node.name for node in graph.node}
    assert all(traced[layer.name] for layer in layers), traced
    assert all(set(nodes) <= names for nodes in traced.values())
    fully_connected = next(layer for layer in layers if layer.layer_type == "FullyConnected")
    assert traced[fully_connected.name] == ("fc",)
    # The residual Add and the Relu after it are one layer, and it says so.
    assert any({"residual", "relu2"} <= set(nodes) for nodes in traced.values())


def test_layer_times_come_from_the_performance_counters(cnn_path: Path, tmp_path: Path) -> None:
    with runner_for_engine(_engine(cnn_path, tmp_path), profiling=True) as runner:
        times, wall_ms = layer_times(runner, FEED, runs=3)
        executed = {layer.name for layer in runtime_layers(runner.compiled)}
    assert times and set(times) <= executed
    assert all(ms >= 0 for ms in times.values()) and sum(times.values()) > 0
    assert wall_ms > 0


def test_layer_times_need_a_profiling_runner(cnn_path: Path, tmp_path: Path) -> None:
    with runner_for_engine(_engine(cnn_path, tmp_path)) as runner, \
            pytest.raises(InternalError, match="without profiling"):
        layer_times(runner, FEED, runs=1)
