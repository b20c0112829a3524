"""What OpenVINO's CPU plugin made of a model, layer by layer: each executed layer's type, the
precision it runs at, its time from the per-layer performance counters, and the ONNX nodes it
computes.

A compiled layer names the IR ops it fused (its runtime graph's `originalLayersNames`); an IR op
is traced to the ONNX node it came from by the tensors it writes (OpenVINO keeps the ONNX output
names on them) or by its own name (the ONNX node's, or that name with a "/suffix" where the
frontend split a node into several ops). An op that names neither (one of the ops a node was
decomposed into, or one OpenVINO's transformations made) is the node of the first ops it feeds
that do map, a few steps on at most: a decomposition's last op writes the node's output. A layer
the CPU plugin added itself (a Reorder between layouts) computes the value its input holds: it is
credited to the layer producing that input (as optimizer/measure/provenance.py credits a node
that only moves a tensor).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import openvino as ov

from optimizer.backends.openvino.runner import OpenVinoRunner
from optimizer.errors import InternalError

__all__ = ["RuntimeLayer", "ir_node_origins", "layer_nodes", "layer_times", "runtime_layers"]

# Runtime-graph layers that compute nothing (the performance counters list them as not run).
_NOT_COMPUTED = frozenset({"Input", "Output", "Const"})
_MAX_FORWARD_STEPS = 8  # an unnamed IR op's consumers followed this far to a mapped one


@dataclass(frozen=True)
class RuntimeLayer:
    name: str  # the compiled layer's name (the performance counters' node_name)
    layer_type: str  # the CPU plugin's layer type ("Convolution", "Eltwise", "Reorder")
    precision: str  # what it runs at ("bf16", "f32", "u8"...)
    ir_ops: tuple[str, ...]  # the IR ops it fused (empty for the plugin's own Reorders)
    inputs: tuple[str, ...] = ()  # the layers whose outputs it reads


def runtime_layers(compiled: ov.CompiledModel) -> tuple[RuntimeLayer, ...]:
    """The compiled model's executed layers in execution order (inputs, outputs and constants
    left out)."""
    layers = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind = info["layerType"].astype(str)
        if kind in _NOT_COMPUTED:
            continue
        fused = info["originalLayersNames"].astype(str)
        layers.append(RuntimeLayer(
            name=op.get_friendly_name(), layer_type=kind,
            precision=info["runtimePrecision"].astype(str),
            ir_ops=tuple(name for name in fused.split(",") if name),
            inputs=tuple(port.get_source_output().get_node().get_friendly_name()
                         for port in op.inputs())))
    return tuple(layers)


def layer_nodes(layers: tuple[RuntimeLayer, ...], origins: Mapping[str, tuple[str, ...]]
                ) -> dict[str, tuple[str, ...]]:
    """Each layer's ONNX nodes: those of the IR ops it fused, else (a layer the plugin added)
    those of the layer producing its first input, and so on back, else those of the first
    layer reading it."""
    by_name = {layer.name: layer for layer in layers}
    found: dict[str, tuple[str, ...]] = {}

    def nodes_of(layer: RuntimeLayer, seen: frozenset[str]) -> tuple[str, ...]:
        if layer.name in found:
            return found[layer.name]
        own = tuple(dict.fromkeys(node for op in layer.ir_ops for node in origins.get(op, ())))
        if not own and layer.inputs and layer.inputs[0] in by_name \
                and layer.inputs[0] not in seen:
            own = nodes_of(by_name[layer.inputs[0]], seen | {layer.name})
        found[layer.name] = own
        return own

    for layer in layers:
        nodes_of(layer, frozenset())
    # A layer reading a graph input (the input's Reorder) has no producer: it is credited to
    # the nodes of the first layer reading it.
    for layer in layers:
        if not found[layer.name]:
            readers = [found[other.name] for other in layers
                       if layer.name in other.inputs and found[other.name]]
            found[layer.name] = readers[0] if readers else ()
    return found


def layer_times(runner: OpenVinoRunner, feeds: Mapping[str, np.ndarray], *, runs: int
                ) -> tuple[dict[str, float], float]:
    """Each executed layer's median milliseconds over `runs` runs of `feeds` (from the
    performance counters), and the median wall-clock milliseconds of a run.

    Raises:
        InternalError: the runner was not compiled with `profiling`.
        InferenceError: OpenVINO fails to run the model.
    """
    if not runner.profiling:
        raise InternalError(f"the runner of {runner.model_path.name!r} was compiled without "
                            "profiling: its layers have no times")
    runner.infer(feeds)  # the first run allocates and primes; not counted
    per_layer: dict[str, list[float]] = {}
    walls = []
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        runner.infer(feeds)
        walls.append((time.perf_counter() - started) * 1e3)
        for info in runner.request.get_profiling_info():
            if info.status == ov.ProfilingInfo.Status.EXECUTED:
                per_layer.setdefault(info.node_name, []).append(
                    info.real_time.total_seconds() * 1e3)
    return ({name: statistics.median(times) for name, times in per_layer.items()},
            statistics.median(walls))


def ir_node_origins(ir_path: Path, graph: onnx.GraphProto) -> dict[str, tuple[str, ...]]:
    """Each IR op's ONNX nodes (of `graph`, the model the IR was converted from), by the tensors
    it writes and by its name; ops that trace to none are left out."""
    producers = {output: node.name for node in graph.node for output in node.output if output}
    names = {node.name for node in graph.node if node.name}
    ops = ov.Core().read_model(str(ir_path)).get_ordered_ops()
    own: dict[str, tuple[str, ...]] = {}
    consumers: dict[str, list[str]] = {}
    for op in ops:
        name = op.get_friendly_name()
        found = [producers[tensor] for port in op.outputs() for tensor in port.get_names()
                 if tensor in producers]
        for candidate in (name, name.split("/")[0]):
            if candidate in names:
                found.append(candidate)
        if found:
            own[name] = tuple(dict.fromkeys(found))
        consumers[name] = [target.get_node().get_friendly_name() for port in op.outputs()
                           for target in port.get_target_inputs()]
    origins = dict(own)
    for op in ops:
        name = op.get_friendly_name()
        if name in own or op.get_type_name() in ("Parameter", "Constant", "Result"):
            continue
        frontier, reached = consumers.get(name, []), []
        for _ in range(_MAX_FORWARD_STEPS):
            reached = [node for target in frontier for node in own.get(target, ())]
            if reached or not frontier:
                break
            frontier = [after for target in frontier for after in consumers.get(target, [])]
        if reached:
            origins[name] = tuple(dict.fromkeys(reached))
    return origins
