"""Time quantized variants against their fp32 model, interleaved in one process
(optimizer/measure/interleaved.py says how): on ONNX Runtime, or in the runners a backend opens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort

from optimizer.backends.onnxruntime.runner import PROVIDERS, OptimizationLevel, session_options
from optimizer.backends.runner import Runner
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios

__all__ = ["LatencyRatio", "interleaved_ratios", "runner_ratios"]


def interleaved_ratios(models: Sequence[Path], feed: Mapping[str, np.ndarray], *,
                       level: OptimizationLevel, threads: int | None, rounds: int = 9,
                       calls: int = 3, seed: int = 0) -> list[LatencyRatio]:
    """Each model's latency ratio to `models[0]` (whose own ratio is 1), at `level` with
    `threads` intra-op threads, over `rounds` interleaved rounds of at least `calls` calls."""
    runs = []
    for path in models:
        options = session_options(level, threads)
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), sess_options=options,
                                       providers=list(PROVIDERS))
        given = {arg.name: np.asarray(feed[arg.name]) for arg in session.get_inputs()}
        runs.append(partial(session.run, None, given))
    return interleaved_call_ratios(runs, rounds=rounds, calls=calls, seed=seed)


def runner_ratios(models: Sequence[Path], feed: Mapping[str, np.ndarray],
                  open_runner: Callable[[Path, int | None], Runner], *, threads: int | None,
                  rounds: int = 9, calls: int = 3, seed: int = 0) -> list[LatencyRatio]:
    """Each model's latency ratio to `models[0]`, as `interleaved_ratios`, each run by the
    runner `open_runner` opens for it at `threads` (a backend's own runtime)."""
    with contextlib.ExitStack() as stack:
        runs = []
        for path in models:
            runner = stack.enter_context(open_runner(path, threads))
            given = {spec.name: np.asarray(feed[spec.name]) for spec in runner.inputs}
            runs.append(partial(runner.infer, given))
        return interleaved_call_ratios(runs, rounds=rounds, calls=calls, seed=seed)
