"""Ablation: benchmark fusion stages cumulatively, the way a fusion study reports them.

Variants: no passes → clean-up + Conv+BN(+activation) → + Conv+Add+Relu → + MatMul/Gemm → all.
Each is timed interleaved with the others in ONNX Runtime with its own graph optimizations off,
so the differences are our fusions' alone. A stage slower than the one before it is kept in the
result (and flagged by the caller), never hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.benchmark import BenchmarkOptions, BenchmarkResult, benchmark_interleaved
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES

__all__ = ["ABLATION_STAGES", "ablation_pass_sets", "run_ablation"]

# (variant name, the pass stages it includes); each adds to the one before.
ABLATION_STAGES: tuple[tuple[str, frozenset[str]], ...] = (
    ("none", frozenset()),
    ("conv_bn_act", frozenset({"cleanup", "conv_bn_act"})),
    ("add_relu", frozenset({"cleanup", "conv_bn_act", "add_relu"})),
    ("matmul_gemm", frozenset({"cleanup", "conv_bn_act", "add_relu", "matmul_gemm"})),
    ("all", frozenset({"cleanup", "conv_bn_act", "add_relu", "matmul_gemm", "other"})),
)


def ablation_pass_sets(backend: str) -> list[tuple[str, list[str]]]:
    """The pass names of each cumulative stage for `backend` (default-on passes only)."""
    return [
        (name, [p.name for p in DEFAULT_PASSES
                if p.stage in stages and p.supports(backend) and backend not in p.off_by_default])
        for name, stages in ABLATION_STAGES
    ]


def run_ablation(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    options: BenchmarkOptions,
    *,
    backend: str,
    batch_size: int,
    work_dir: Path,
) -> list[BenchmarkResult]:
    """Benchmark each cumulative stage of `model` (static shapes), reference = "none"."""
    paths = {}
    for name, passes in ablation_pass_sets(backend):
        staged, _ = optimize_model(model, OptimizeOptions(backend=backend, passes=passes))
        paths[name] = work_dir / f"ablation-{name}.onnx"
        onnx.save(staged, paths[name])
    with ExitStack() as stack:
        runners = {name: stack.enter_context(OnnxRuntimeRunner(path)) for name, path in paths.items()}
        return benchmark_interleaved(runners, feeds, options, reference="none", batch_size=batch_size)
