"""An openvino job's per-node profiles: the original as the benchmark times it (the upload at
ONNX Runtime's default level, the job's threads: ort_profile.py's) and the engine from
OpenVINO's per-layer performance counters, each compiled layer traced to the model the passes
rewrote in three hops: the layer's fused IR ops, each IR op's ONNX node of the fused model
(optimizer/backends/openvino/layers.py), the fused model's origin tags
(optimizer/measure/provenance.py)."""

import statistics
import time
from typing import Any

import numpy as np

from optimizer.backends.openvino.build import OvEngine, runner_for_engine
from optimizer.backends.openvino.layers import (
    ir_node_origins,
    layer_nodes,
    layer_times,
    runtime_layers,
)
from optimizer.backends.openvino.runner import OpenVinoRunner
from optimizer.measure.node_profile import NodeProfile, NodeTime
from optimizer.measure.provenance import Provenance, compose, named_graph, node_provenance
from worker.pipeline.backends.base import PROFILE_RUNS, NodeProfiles
from worker.pipeline.backends.ort_profile import original_node_profile
from worker.pipeline.results import JobRun, LoadedModel, OptimizedModel

__all__ = ["openvino_node_profiles"]


def openvino_node_profiles(run: JobRun, loaded: LoadedModel, optimized: OptimizedModel,
                           engine: OvEngine, feed: dict[str, Any]) -> NodeProfiles:
    """Raises:
        EngineBuildError, InferenceError: a model cannot be loaded or run to profile it.
    """
    given = {name: np.asarray(value) for name, value in feed.items()}
    runs = max(1, min(PROFILE_RUNS, run.config.benchmark.iterations))
    original, original_provenance = original_node_profile(run, loaded, given, runs=runs)
    with runner_for_engine(engine.manifest_path, profiling=True) as profiled:
        times, profiled_ms = layer_times(profiled, given, runs=runs)
        layers = runtime_layers(profiled.compiled)
    # The counters slow each run a little: the latency is the unprofiled engine's.
    with runner_for_engine(engine.manifest_path) as plain:
        latency_ms = _median_run_ms(plain, given, runs)
    nodes = sorted((NodeTime(layer.name, layer.layer_type, times[layer.name], 1)
                    for layer in layers if layer.name in times), key=lambda n: -n.time_ms)
    fused = named_graph(optimized.engine_source)
    traced: Provenance = layer_nodes(layers, ir_node_origins(engine.model_path, fused))
    threads = engine.manifest.get("threads")
    return NodeProfiles(
        original=original,
        engine=NodeProfile(tuple(nodes), latency_ms=latency_ms, profiled_run_ms=profiled_ms,
                           runs=runs),
        original_provenance=original_provenance,
        engine_provenance=compose(node_provenance(named_graph(loaded.fusion_source), fused),
                                  traced),
        profiler=(f"OpenVINO's per-layer performance counters ({engine.manifest['precision']}), "
                  f"{runs} runs, {'default' if threads is None else threads} threads; the "
                  "original: ONNX Runtime's profiler"))


def _median_run_ms(runner: OpenVinoRunner, feed: dict[str, np.ndarray], runs: int) -> float:
    runner.infer(feed)  # the first run allocates and primes; not counted
    walls = []
    for _ in range(max(1, runs)):
        started = time.perf_counter()
        runner.infer(feed)
        walls.append((time.perf_counter() - started) * 1e3)
    return statistics.median(walls)
