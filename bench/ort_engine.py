"""Benchmark the ONNX Runtime engine FuseForge builds against the original model.

For each model built in code (random weights), builds the engine at every ORT optimization level
and times it interleaved with the original (ORT, graph optimizations disabled) in this process,
then prints the median of per-round speed-ups. The machine is shared and noisy: compare ratios
from one run, never absolute times across runs.

    .venv/bin/python -m bench.ort_engine [--iterations 200] [--batch 8]
"""

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import onnx

from optimizer.backends.onnxruntime.build import OrtBuildOptions, build_ort_engine, runner_for_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.model.input_ranges import infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.testing.models import mlp, small_cnn

LEVELS = ("basic", "extended", "all")


def _bench_model(name: str, model: onnx.ModelProto, batch: int, options: BenchmarkOptions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        original_path = Path(tmp) / "original.onnx"
        onnx.save(model, original_path)
        summary = summarize_model(model)
        # Dynamic dims default to 1; then the leading (batch) dim is set to `batch`.
        shapes = {
            name: (batch, *shape[1:])
            for name, shape in resolve_input_shapes(summary.inputs, None).items()
        }
        specs = [replace(spec, shape=shapes[spec.name]) for spec in summary.inputs]
        feeds = random_feeds(specs, count=1, seed=0, ranges=infer_input_ranges(model))[0]
        runners = {"original": OnnxRuntimeRunner(original_path)}
        build_s = {}
        for level in LEVELS:
            out = Path(tmp) / level
            out.mkdir()
            started = time.perf_counter()
            engine = build_ort_engine(
                original_path, out, options=OrtBuildOptions(optimization_level=level), input_shapes=shapes
            )
            build_s[level] = time.perf_counter() - started
            runners[f"engine@{level}"] = runner_for_engine(engine.manifest_path)
        results = benchmark_interleaved(runners, feeds, options, reference="original", batch_size=batch)
        for runner in runners.values():
            runner.__exit__(None, None, None)
    print(f"\n{name} (batch {batch}, {options.iterations} interleaved rounds)")
    print(f"{'variant':<18}{'p50 ms':>9}{'p90 ms':>9}{'speed-up':>10}{'peak MB':>9}{'build s':>9}")
    for r in results:
        speedup = f"{r.speedup_vs_reference:.2f}x" if r.speedup_vs_reference else "1 (ref)"
        memory = f"{r.peak_memory_mb:.0f}" if r.peak_memory_mb is not None else "-"
        level = r.variant.partition("@")[2]
        build = f"{build_s[level]:.2f}" if level else "-"
        print(f"{r.variant:<18}{r.latency_ms_p50:>9.3f}{r.latency_ms_p90:>9.3f}{speedup:>10}{memory:>9}{build:>9}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    options = BenchmarkOptions(warmup=args.warmup, iterations=args.iterations, measure_memory=True)
    for name, model in (("small residual CNN", small_cnn(seed=0)), ("MLP", mlp(seed=0))):
        _bench_model(name, model, args.batch, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
