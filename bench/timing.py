"""Time a fused model against its original on ONNX Runtime CPU, for the bench/fuse_*.py scripts.

Both models run in this process at the same ORT optimization level; each round times both once,
alternating which goes first (optimizer.measure.benchmark.benchmark_interleaved), and the figure is the
median of per-round speed-ups: unfused time / fused time, above 1 meaning the fusion is faster.
The machine is shared and noisy: compare ratios from one run, never absolute times across runs.

>>> parser = argparse.ArgumentParser()
>>> add_timing_arguments(parser, iterations=30, levels=["disabled"])
>>> timing = Timing.from_args(parser.parse_args(["--iterations", "3"]))
>>> fused_speedups(model, fused, feeds, timing, levels=["disabled"],  # doctest: +SKIP
...                atol=1e-4, rtol=1e-4)
{'disabled': 1.02}
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner, OptimizationLevel
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved

__all__ = ["Timing", "add_timing_arguments", "fused_speedups"]

_VARIANTS = ("unfused", "fused")  # the first is the reference the speed-ups are taken against


def add_timing_arguments(parser: argparse.ArgumentParser, *, iterations: int, warmup: int = 3,
                         threads: int = 1,
                         levels: Sequence[OptimizationLevel] | None = None) -> None:
    """Add --iterations, --warmup and --threads, and --levels when `levels` gives its default.

    One thread (the usual default) measures the kernels: on a small shared machine ORT's spinning
    thread pool makes interleaved ratios of millisecond runs swing from 0.5x to 1.9x.
    """
    parser.add_argument("--iterations", type=int, default=iterations,
                        help="timed rounds; each runs unfused and fused once")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed runs of each first")
    parser.add_argument("--threads", type=int, default=threads,
                        help="ORT intra-op threads (0: ORT's default, all cores)")
    if levels is not None:
        parser.add_argument("--levels", nargs="+", default=list(levels),
                            choices=list(get_args(OptimizationLevel)),
                            help="ORT graph optimization levels to time at")


@dataclass(frozen=True)
class Timing:
    """How to time: the interleaved rounds, and ORT's intra-op threads (None: ORT's default)."""

    options: BenchmarkOptions
    threads: int | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Timing:
        """From the options add_timing_arguments added."""
        return cls(BenchmarkOptions(warmup=args.warmup, iterations=args.iterations,
                                    measure_memory=False),
                   args.threads or None)


def fused_speedups(original: onnx.ModelProto, fused: onnx.ModelProto,
                   feeds: Mapping[str, np.ndarray], timing: Timing, *,
                   levels: Sequence[OptimizationLevel], atol: float, rtol: float,
                   batch_size: int = 1) -> dict[str, float]:
    """Per ORT level, the median over interleaved rounds of unfused time / fused time.

    Before timing, both models run at every level and each output must match the original's at
    the first level within `atol` / `rtol` (an AssertionError says which session differs). Each
    level is timed on its own, so ratios compare sessions at the same level. `batch_size` only
    feeds the throughput figure, which is not returned.
    """
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as sessions:
        paths = dict(zip(_VARIANTS, (Path(tmp) / "unfused.onnx", Path(tmp) / "fused.onnx"),
                         strict=True))
        onnx.save(original, paths["unfused"])
        onnx.save(fused, paths["fused"])
        runners = {
            (variant, level): sessions.enter_context(OnnxRuntimeRunner(
                path, optimization_level=level, intra_op_threads=timing.threads))
            for level in levels for variant, path in paths.items()
        }
        want = runners["unfused", levels[0]].infer(feeds)
        for (variant, level), runner in runners.items():
            got = runner.infer(feeds)
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value, atol=atol, rtol=rtol,
                                           err_msg=f"{variant}@{level}, output {name!r}")
        speedups: dict[str, float] = {}
        for level in levels:
            pair = {variant: runners[variant, level] for variant in _VARIANTS}
            results = benchmark_interleaved(pair, feeds, timing.options, reference="unfused",
                                            batch_size=batch_size)
            [speedup] = [r.speedup_vs_reference for r in results if r.variant == "fused"]
            assert speedup is not None
            speedups[level] = speedup
    return speedups
