"""Time quantized variants against their fp32 model on ONNX Runtime, interleaved in one process
(optimizer/measure/interleaved.py says how)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort

from optimizer.backends.onnxruntime.runner import PROVIDERS, OptimizationLevel, session_options
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios

__all__ = ["LatencyRatio", "interleaved_ratios"]


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
