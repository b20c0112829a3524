"""A TensorRT engine's per-layer profile, as a `NodeProfile`, and the ONNX nodes each layer
computes (the engine inspector's report: optimizer/backends/tensorrt/inspector.py).

The layer times are TensorRT's profiler's; the latency is timed apart on the device without
it, so how close the layers' sum comes to it says how faithful the profile is (`coverage`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from optimizer.backends.tensorrt.inspector import EngineLayer, parse_engine_information
from optimizer.measure.node_profile import NodeProfile, NodeTime

__all__ = ["LayerProfiledRunner", "engine_layers", "tensorrt_layer_profile"]


class LayerProfiledRunner(Protocol):
    """`TensorRTRunner` as this needs it (FakeTensorRT's runner has the same two methods)."""

    def profile_layers(self, feeds: Mapping[str, np.ndarray], *, runs: int = 10,
                       warmup: int = 2) -> dict[str, float]: ...

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]: ...


def engine_layers(report_path: Path) -> tuple[EngineLayer, ...]:
    """The layers of an engine's first optimization profile, from the engine report a build
    wrote (its "inspector" key: TensorRT's engine inspector JSON)."""
    inspector = json.loads(report_path.read_text()).get("inspector") or {}
    return parse_engine_information(json.dumps(inspector)).profile_layers(0)


def tensorrt_layer_profile(runner: LayerProfiledRunner, feeds: Mapping[str, np.ndarray],
                           layers: Sequence[EngineLayer], *, runs: int = 10
                           ) -> tuple[NodeProfile, dict[str, tuple[str, ...]]]:
    """The engine's layer times on `feeds` (slowest first) and each layer's ONNX nodes (of the
    model the engine was built from). A layer the profiler names but the inspector does not
    (TensorRT's own reformatting) keeps its name and maps to no node."""
    times = runner.profile_layers(feeds, runs=runs)
    latency = statistics.median(runner.time_inference(feeds, warmup=2, iterations=runs))
    by_name = {layer.name: layer for layer in layers}
    nodes = []
    for name, ms in times.items():
        layer = by_name.get(name)
        kind = (layer.parameter_type or layer.layer_type) if layer is not None else "?"
        nodes.append(NodeTime(name, kind or "?", ms, 1, _layer_bytes(layer)))
    nodes.sort(key=lambda n: -n.time_ms)
    return (NodeProfile(tuple(nodes), latency_ms=latency, profiled_run_ms=sum(times.values()),
                        runs=runs),
            {layer.name: layer.fused_onnx_nodes for layer in layers})


def _layer_bytes(layer: EngineLayer | None) -> int:
    """Bytes the layer's inputs and outputs hold, where the inspector gave their dims and type."""
    if layer is None:
        return 0
    return sum(tensor.size_bytes or 0 for tensor in (*layer.inputs, *layer.outputs))
