"""Time attention on ONNX Runtime CPU with denormals flushed against IEEE gradual underflow.

Each case is one attention block, Softmax(Q K^T / sqrt(d) + mask) V, with the additive mask
transformers writes (a large negative number where a key is masked): no mask, padding (the
last half of the keys masked) and causal. The same session runs with the engine runner's
flushing on and off (optimizer/backends/onnxruntime/denormals.py), interleaved, at ORT's
default level with one intra-op thread; the figure is the median of per-round ratios, flushed
time / IEEE time (below 1: flushing is faster). Outputs are compared first.

    .venv/bin/python -m bench.denormals [--iterations 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench.timing import Timing, add_timing_arguments
from optimizer.backends.onnxruntime.denormals import flushing_supported
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.measure.benchmark import benchmark_interleaved

CASES = [(4, 128, 32), (12, 128, 64), (12, 384, 64)]  # heads, sequence, head size
MASKS = ("none", "padding", "causal")
_MASKED = float(np.finfo(np.float32).min)  # what transformers adds at a masked key


def attention_model(heads: int, seq: int, head_size: int) -> onnx.ModelProto:
    shape = [1, heads, seq, head_size]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q", "kt"], ["scores"]),
         helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
         helper.make_node("Add", ["scaled", "mask"], ["masked"]),
         helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
         helper.make_node("MatMul", ["probs", "v"], ["out"])],
        "attention",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in "qkv"]
        + [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, seq, seq])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        initializer=[helper.make_tensor("scale", TensorProto.FLOAT, [],
                                        [1.0 / np.sqrt(head_size)])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def mask(kind: str, seq: int) -> np.ndarray:
    keep = np.ones((seq, seq), bool)
    if kind == "padding":
        keep[:, seq // 2:] = False
    elif kind == "causal":
        keep = np.tril(keep)
    return np.where(keep, 0.0, _MASKED).astype(np.float32)[None, None]


def time_case(path: Path, feeds: dict[str, np.ndarray], timing: Timing) -> float:
    with (OnnxRuntimeRunner(path, optimization_level="all", intra_op_threads=timing.threads)
          as ieee,
          OnnxRuntimeRunner(path, optimization_level="all", intra_op_threads=timing.threads,
                            flush_denormals=True) as flushed):
        np.testing.assert_allclose(flushed.infer(feeds)["out"], ieee.infer(feeds)["out"],
                                   rtol=1e-5, atol=1e-6)
        results = benchmark_interleaved({"ieee": ieee, "flushed": flushed}, feeds,
                                        timing.options, reference="ieee", batch_size=1)
    [speedup] = [r.speedup_vs_reference for r in results if r.variant == "flushed"]
    assert speedup is not None
    return 1.0 / speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_arguments(parser, iterations=40)
    timing = Timing.from_args(parser.parse_args())
    if not flushing_supported():
        print("denormal flushing is not supported on this platform: nothing to time")
        return 1
    rng = np.random.default_rng(0)
    print(f"{'heads':>5} {'seq':>4} {'head':>4}  " + "  ".join(f"{m:>8}" for m in MASKS)
          + "   (flushed time / IEEE time, median of per-round ratios)")
    with tempfile.TemporaryDirectory() as tmp:
        for heads, seq, head_size in CASES:
            path = Path(tmp) / f"attention-{heads}-{seq}.onnx"
            onnx.save(attention_model(heads, seq, head_size), path)
            qkv = {name: rng.standard_normal((1, heads, seq, head_size)).astype(np.float32)
                   for name in "qkv"}
            ratios = [time_case(path, {**qkv, "mask": mask(kind, seq)}, timing)
                      for kind in MASKS]
            print(f"{heads:>5} {seq:>4} {head_size:>4}  "
                  + "  ".join(f"{ratio:>8.2f}" for ratio in ratios))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
