"""Time fuse_matmul_add's lowerings against the unfused ops on ONNX Runtime CPU.

Each case is Relu → linear → Relu (so the linear's input and output are intermediates, as in a
network), built in code with random weights. The fused model is produced by the pass's own
rules; the rank-3 Reshape → Gemm → Reshape rule runs here without its K limit, since this script
is what sets that limit. Both run with ORT graph optimizations disabled, interleaved, and the
median of per-round unfused/fused time ratios is printed (> 1: the fused form is faster; see
bench/timing.py).

    .venv/bin/python -m bench.fuse_matmul_add [--iterations 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench.timing import Timing, add_timing_arguments, fused_speedups
from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_matmul_add import FUSE_MATMUL_ADD, MatMulAddToReshapedGemm
from optimizer.registries.backends import Backend
from optimizer.testing.passes import apply_pass, random_inputs

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}

# The reshaped-Gemm rule with no K limit, so every K can be measured.
UNLIMITED_RESHAPED_GEMM = FusionPass(
    name="reshaped_gemm_unlimited", summary="bench only", stage="matmul_gemm",
    rules={Backend.ONNXRUNTIME: [MatMulAddToReshapedGemm.rule(max_k=1 << 30)]},
)


def linear(x_shape: tuple[int, ...], n: int, dtype: type, tail: str) -> onnx.ModelProto:
    """Relu → MatMul(x, W) → Add(bias) or Mul(scale) → Relu."""
    rng = np.random.default_rng(0)
    k, elem = x_shape[-1], NP_TO_ONNX[dtype]
    param = rng.standard_normal(n) if tail == "Add" else rng.uniform(0.5, 2.0, n)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(dtype), "w"),
             numpy_helper.from_array(param.astype(dtype), "p")]
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("MatMul", ["xr", "w"], ["mm"]),
             helper.make_node(tail, ["mm", "p"], ["lin"]),
             helper.make_node("Relu", ["lin"], ["y"])]
    graph = helper.make_graph(
        nodes, "linear", [helper.make_tensor_value_info("x", elem, list(x_shape))],
        [helper.make_tensor_value_info("y", elem, [*x_shape[:-1], n])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)  # the rules need ranks (cleanup infers them)


CASES: list[tuple[str, tuple[int, ...], int, str, FusionPass]] = [
    *[("2-D MatMul+Add → Gemm", shape, n, "Add", FUSE_MATMUL_ADD)
      for shape, n in (((1, 768), 768), ((32, 768), 768), ((128, 768), 3072), ((256, 32), 32),
                       ((64, 64), 64))],
    *[("rank-3 → Reshape/Gemm/Reshape", (max(1, rows // 32), min(rows, 32), k), n, "Add",
       UNLIMITED_RESHAPED_GEMM)
      for k, n in ((32, 32), (64, 64), (64, 256), (128, 128), (256, 256), (768, 64), (768, 768))
      for rows in (16, 128, 1024)],
    *[("Mul(MatMul) → MatMul(W*c)", shape, n, "Mul", FUSE_MATMUL_ADD)
      for shape, n in (((8, 128, 768), 768), ((4, 32, 64), 64))],
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser, iterations=100, warmup=5)
    args = parser.parse_args(argv)
    timing = Timing.from_args(args)
    ort.set_default_logger_severity(3)  # the rewrite leaves the old initializers for cleanup
    print(f"{'case':<32}{'dtype':<9}{'x shape':<18}{'N':>6}{'unfused/fused':>15}")
    for dtype in (np.float32, np.float16):
        for label, shape, n, tail, fusion_pass in CASES:
            model = linear(shape, n, dtype, tail)
            fused, _ = apply_pass(model, fusion_pass, expect_count=1)
            speedups = fused_speedups(model, fused, random_inputs(model, seed=1), timing,
                                      levels=["disabled"], atol=2e-2, rtol=2e-2)
            print(f"{label:<32}{np.dtype(dtype).name:<9}{str(shape):<18}{n:>6}"
                  f"{speedups['disabled']:>15.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
