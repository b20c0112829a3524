"""Time a FuseForge engine against the original model at ONNX Runtime's default level.

The job's own benchmark times the engine against the original with ORT's optimizations off;
a user who would otherwise just load the model in ORT runs it at the default level
(ORT_ENABLE_ALL), so that is the yardstick here. Both run in this process, interleaved
(optimizer.measure.benchmark.benchmark_interleaved), on the same seeded feeds at the engine's shapes;
the figure is the engine's time over the original's, from the median of per-round ratios
(<= 1.00: the engine is at least as fast).

When a job failed there is no engine to download; `library_engine` then builds one the way a
job does (fixed shapes, optimize_model, build_ort_engine) so the table still shows what the
passes buy, marked as such, or the library's own error.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.backends.onnxruntime.build import OrtBuildOptions, build_ort_engine, runner_for_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import Runner
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model

__all__ = ["engine_ratio", "graphs_after_ort", "library_engine"]


def library_engine(original: Path, input_shapes: Mapping[str, Any] | None,
                   out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Optimize and build `original` as a job would; the engine folder and the fusion report.

    Raises whatever the library raises (OptimizerError subclasses for the model's faults).
    """
    model = onnx.load(original)
    shapes = resolve_input_shapes(summarize_model(model).inputs, input_shapes)
    fused, report = optimize_model(fix_input_shapes(model, shapes),
                                   OptimizeOptions(backend="onnxruntime", passes="all"))
    out_dir.mkdir(parents=True, exist_ok=True)
    fused_path = out_dir / "fused.onnx"
    onnx.save(fused, fused_path)
    build_ort_engine(fused_path, out_dir, options=OrtBuildOptions(), input_shapes=shapes)
    return out_dir, report.to_dict()


def engine_ratio(original: Path, engine_dir: Path, *, ranges: Mapping[str, tuple[float, float]],
                 rounds: int, warmup: int, threads: int | None,
                 min_seconds: float = 2.0) -> tuple[float, dict[str, float]]:
    """Engine time / original time at ORT's default level (the median of per-round ratios),
    and each variant's median latency in ms; for an engine that flushes denormals, also the
    same engine with IEEE denormals ("engine, denormals kept"), so the table can tell the
    rewrites' share from flushing's (latencies key "engine/orig, denormals kept" holds its
    ratio).

    At least `rounds` rounds, more for a fast model: enough for the original to run about
    `min_seconds` in all (sub-millisecond models swing by 10% over a few dozen rounds).
    """
    manifest = json.loads((engine_dir / "manifest.json").read_text())
    shapes = {name: tuple(shape) for name, shape in manifest["input_shapes"].items()}
    specs = [replace(spec, shape=shapes[spec.name])
             for spec in summarize_model(onnx.load(original, load_external_data=False)).inputs]
    feeds = random_feeds(specs, count=1, seed=0,
                         ranges={**index_ranges(original), **ranges})[0]
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        # The manifest as the job wrote it, but the same thread count as the original's session.
        variants: dict[str, Runner] = {"original": stack.enter_context(OnnxRuntimeRunner(
            original, optimization_level="all", intra_op_threads=threads))}
        timed = {"engine": {**manifest, "intra_op_threads": threads}}
        if manifest.get("flush_denormals"):
            timed[_KEPT] = {**timed["engine"], "flush_denormals": False}
        for name, content in timed.items():
            folder = Path(tmp) / name.replace(" ", "_").replace(",", "")
            folder.mkdir()
            (folder / "manifest.json").write_text(json.dumps(content))
            (folder / manifest["engine_file"]).symlink_to(
                (engine_dir / manifest["engine_file"]).resolve())
            variants[name] = stack.enter_context(runner_for_engine(folder / "manifest.json"))
        options = BenchmarkOptions(warmup=warmup, measure_memory=False,
                                   iterations=_rounds(variants["original"], feeds, rounds,
                                                      min_seconds))
        results = benchmark_interleaved(variants, feeds, options, reference="original",
                                        batch_size=1)
    speedups = {r.variant: r.speedup_vs_reference for r in results}
    if speedups.get("engine") is None:
        raise RuntimeError("the benchmark gave the engine no speed-up figure")
    figures = {r.variant: r.latency_ms_p50 for r in results}
    if speedups.get(_KEPT):
        figures[f"engine/orig, {_KEPT.removeprefix('engine, ')}"] = 1.0 / speedups[_KEPT]
    # The median of per-round original/engine, inverted: engine/original (exact for odd rounds).
    return 1.0 / speedups["engine"], figures


_KEPT = "engine, denormals kept"


def graphs_after_ort(original: Path, engine_dir: Path) -> str:
    """What ONNX Runtime makes of each at the default level, as the two sessions run them:
    'same ops (58 nodes)' when the op histograms match (then the timing can only differ by
    noise: the engine is the graph ORT would have made of the original), else 'engine 412 /
    original 530 nodes'."""
    manifest = json.loads((engine_dir / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        ours = _optimized_ops(engine_dir / manifest["engine_file"], Path(tmp) / "engine.onnx",
                              list(manifest.get("disabled_optimizers", {})))
        theirs = _optimized_ops(original, Path(tmp) / "original.onnx", [])
    if ours == theirs:
        return f"same ops ({sum(ours.values())} nodes)"
    return f"engine {sum(ours.values())} / original {sum(theirs.values())} nodes"


def _optimized_ops(model: Path, out: Path, disabled: list[str]) -> Counter[str]:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3  # not the warning that NCHWc layouts are CPU-specific
    ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=disabled)
    graph = onnx.load(out).graph
    return Counter(f"{node.domain}:{node.op_type}" for node in graph.node)


def _rounds(reference: OnnxRuntimeRunner, feeds: Mapping[str, np.ndarray], rounds: int,
            min_seconds: float) -> int:
    reference.infer(feeds)  # the first run pays for allocations
    started = time.perf_counter()
    for _ in range(3):
        reference.infer(feeds)
    per_run = max((time.perf_counter() - started) / 3, 1e-5)
    return max(rounds, min(_MAX_ROUNDS, math.ceil(min_seconds / per_run)))


_MAX_ROUNDS = 2000


def index_ranges(path: Path) -> dict[str, tuple[float, float]]:
    """Integer inputs that index an embedding table directly: [0, rows); masks: {0, 1}.

    Only for timing: valid indices keep ORT on its normal path, and both models get the same.
    """
    model = onnx.load(path, load_external_data=False)
    rows = {t.name: t.dims[0] for t in model.graph.initializer if t.dims}
    ranges: dict[str, tuple[float, float]] = {}
    integer = {v.name for v in model.graph.input
               if v.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[0] in rows and node.input[1] in integer:
            ranges[node.input[1]] = (0, int(rows[node.input[0]]))
    for name in integer:
        if "mask" in name:
            ranges[name] = (0, 2)
    return ranges
