"""Where an ONNX Runtime session's time goes: per-node kernel times from its profiler.

The profiler adds time to every node it records, so each node's time is corrected by the
per-node share of the difference between a profiled and an unprofiled run; the corrected times
are not scaled to the latency, so how close their sum comes to it says how faithful the
profile is (`coverage`). The session's own optimized graph is kept beside the times: its node
names are the profile's, and optimizer/measure/provenance.py maps them back to the model's.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.backends.onnxruntime.denormals import denormals_flushed
from optimizer.backends.onnxruntime.runner import (
    PROVIDERS,
    OnnxRuntimeRunner,
    OptimizationLevel,
    session_options,
)
from optimizer.errors import EngineBuildError, InternalError

__all__ = ["NodeProfile", "NodeTime", "ProfiledSession", "profile_onnxruntime"]

_KERNEL_SUFFIX = "_kernel_time"


@dataclass(frozen=True)
class NodeTime:
    node: str  # the node's name in the session's optimized graph
    op_type: str
    time_ms: float  # median over the profiled runs, less the profiler's per-node overhead
    calls: int  # how often it ran per run (a node inside a loop runs more than once)
    bytes_moved: int = 0  # inputs, weights and outputs per call, as the profiler sized them


@dataclass(frozen=True)
class NodeProfile:
    nodes: tuple[NodeTime, ...]  # slowest first
    latency_ms: float  # median of the unprofiled runs
    profiled_run_ms: float  # median of the profiled runs (the profiler's overhead included)
    runs: int

    @property
    def node_sum_ms(self) -> float:
        return sum(n.time_ms for n in self.nodes)

    @property
    def coverage(self) -> float:
        """The corrected node times' sum over the measured latency (1.0: all accounted for)."""
        return self.node_sum_ms / self.latency_ms if self.latency_ms > 0 else 0.0

    def by_op_type(self) -> dict[str, float]:
        """Milliseconds per op type, largest first."""
        totals: dict[str, float] = defaultdict(float)
        for node in self.nodes:
            totals[node.op_type] += node.time_ms
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def top(self, count: int) -> tuple[NodeTime, ...]:
        return self.nodes[:count]


@dataclass(frozen=True)
class ProfiledSession:
    profile: NodeProfile
    session_graph: onnx.GraphProto | None  # None where ONNX Runtime could not write it


def profile_onnxruntime(model: Path, feed: Mapping[str, np.ndarray], *,
                        optimization_level: OptimizationLevel = "all",
                        intra_op_threads: int | None = None,
                        disabled_optimizers: Sequence[str] = (), flush_denormals: bool = False,
                        runs: int = 10, warmup: int = 2) -> ProfiledSession:
    """Profile the model at `model` on `feed` in sessions like `OnnxRuntimeRunner`'s with the
    same options: `runs` profiled runs after `warmup`, and as many unprofiled ones,
    alternating so load drift hits both alike.

    Raises:
        InternalError: `runs` < 1, or the profiler recorded no node (a build without it).
        EngineBuildError, InferenceError: ONNX Runtime cannot load or run the model.
    """
    if runs < 1:
        raise InternalError(f"profile_onnxruntime needs runs >= 1, got {runs}.")
    with tempfile.TemporaryDirectory(prefix="fuseforge-profile-") as tmp:
        plain = OnnxRuntimeRunner(model, optimization_level=optimization_level,
                                  intra_op_threads=intra_op_threads,
                                  disabled_optimizers=disabled_optimizers,
                                  flush_denormals=flush_denormals)
        options = session_options(optimization_level, intra_op_threads)
        if flush_denormals:
            options.add_session_config_entry("session.set_denormal_as_zero", "1")
        options.log_severity_level = 3  # not the warning that a layout-optimized graph is saved
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        graph_path = Path(tmp) / "session.onnx"
        options.optimized_model_filepath = str(graph_path)
        try:
            profiled = ort.InferenceSession(str(model), sess_options=options,
                                            providers=list(PROVIDERS),
                                            disabled_optimizers=list(disabled_optimizers))
        except Exception as err:  # ORT's errors share no base class below Exception
            raise EngineBuildError(f"ONNX Runtime could not load {model.name!r} to profile "
                                   f"it: {err}") from err
        given = {spec.name: np.asarray(feed[spec.name]) for spec in plain.inputs}
        with plain, denormals_flushed(flush_denormals):
            for _ in range(warmup):
                plain.infer(given)
            plain_ms = []
            # The profiler records the warm-up too; it is told apart by the runs' order below.
            for _ in range(warmup):
                profiled.run(None, given)
            for _ in range(runs):
                profiled.run(None, given)
                started = time.perf_counter()
                plain.infer(given)
                plain_ms.append((time.perf_counter() - started) * 1000)
        events = json.loads(Path(profiled.end_profiling()).read_text())
        graph = _session_graph(graph_path)
    return ProfiledSession(_profile(events, warmup, statistics.median(plain_ms), runs), graph)


def _session_graph(path: Path) -> onnx.GraphProto | None:
    try:  # the graph only: weights written beside it are not needed to name nodes
        return onnx.load(str(path), load_external_data=False).graph
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError, ValueError):
        return None


def _profile(events: list[dict[str, Any]], warmup: int, latency_ms: float,
             runs: int) -> NodeProfile:
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "Session" and e.get("name") == "model_run")[warmup:]
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in spans]
    calls: dict[str, int] = defaultdict(int)
    op_types: dict[str, str] = {}
    sizes: dict[str, int] = defaultdict(int)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        run = next((i for i, (start, end) in enumerate(spans) if start <= event["ts"] <= end),
                   None)
        if run is None:  # a warm-up run's node
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        per_run[run][node] += event["dur"] / 1000
        op_types[node] = event.get("args", {}).get("op_name", "?")
        if run == 0:
            calls[node] += 1
            sizes[node] += _bytes_moved(event.get("args", {}))
    if not op_types:
        raise InternalError("ONNX Runtime's profiler recorded no node kernel times.")
    profiled_run_ms = statistics.median((end - start) / 1000 for start, end in spans)
    recorded = sum(calls.values())
    overhead_ms = max(0.0, profiled_run_ms - latency_ms) / recorded  # per node call
    nodes = [NodeTime(node, op_types[node],
                      max(0.0, statistics.median(r.get(node, 0.0) for r in per_run)
                          - overhead_ms * calls[node]),
                      calls[node], sizes[node] // max(1, calls[node]))
             for node in op_types]
    nodes.sort(key=lambda n: -n.time_ms)
    return NodeProfile(tuple(nodes), latency_ms, profiled_run_ms, runs)


def _bytes_moved(args: Mapping[str, Any]) -> int:
    """What a kernel read and wrote: ORT's profiler sizes its inputs (activation), weights
    (parameter) and outputs, in bytes."""
    try:
        return sum(int(args.get(key, 0)) for key in ("activation_size", "parameter_size",
                                                      "output_size"))
    except (TypeError, ValueError):
        return 0
