"""Time the LayerNorm, SkipLayerNorm and GELU fusions against the unfused ops on ORT CPU.

For BERT-like shapes (sequence 128, hidden 128..768, batch 1 and 8; GELU on the 4 x hidden
feed-forward activation) it builds one small model per case with random parameters, rewrites
it with the pass under test, checks the outputs agree, and times original and fused
interleaved in this process. The primary figure is at ORT optimization level "disabled" (so
only our rewrite differs); "--levels disabled all" adds the level FuseForge builds engines at,
where ORT may fuse the original itself. Prints the median of per-round speed-ups (unfused time /
fused time: above 1 means the fusion is faster; see bench/timing.py).

    .venv/bin/python -m bench.fuse_norm_gelu [--iterations 30] [--threads 1] [--levels disabled all]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.timing import Timing, add_timing_arguments, fused_speedups
from optimizer.backends.onnxruntime.runner import OptimizationLevel
from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_gelu import FUSE_GELU
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM
from optimizer.passes.fuse_skip_layer_norm import FUSE_SKIP_LAYER_NORM
from optimizer.testing.passes import apply_pass, random_inputs

SEQUENCE = 128
HIDDEN = (128, 256, 768)
BATCHES = (1, 8)

Built = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]
Builder = Callable[[np.random.Generator, int], Built]


def _const(inits: list[onnx.TensorProto], name: str, value: np.ndarray | float) -> str:
    inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
    return name


def _layer_norm(rng: np.random.Generator, hidden: int) -> Built:
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    gamma = _const(inits, "gamma", rng.uniform(0.5, 1.5, hidden))
    beta = _const(inits, "beta", rng.standard_normal(hidden))
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Pow", ["d", _const(inits, "two", 2.0)], ["d2"]),
        helper.make_node("ReduceMean", ["d2", "axes"], ["var"]),
        helper.make_node("Add", ["var", _const(inits, "eps", 1e-5)], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["normalized"]),
        helper.make_node("Mul", ["normalized", gamma], ["scaled"]),
        helper.make_node("Add", ["scaled", beta], ["y"]),
    ]
    return nodes, inits


def _skip_layer_norm(*, bias: bool, keep_sum: bool) -> Builder:
    def build(rng: np.random.Generator, hidden: int) -> Built:
        inits: list[onnx.TensorProto] = []
        nodes = []
        x = "x"
        if bias:
            bias_name = _const(inits, "bias", rng.standard_normal(hidden))
            nodes.append(helper.make_node("Add", ["x", bias_name], ["x_bias"]))
            x = "x_bias"
        gamma = _const(inits, "gamma", rng.uniform(0.5, 1.5, hidden))
        beta = _const(inits, "beta", rng.standard_normal(hidden))
        nodes += [
            helper.make_node("Add", [x, "skip"], ["sum"]),
            helper.make_node("LayerNormalization", ["sum", gamma, beta], ["y"], axis=-1,
                             epsilon=1e-5),
        ]
        if keep_sum:  # the next residual reads the sum
            nodes.append(helper.make_node("Add", ["sum", "y"], ["next"]))
        return nodes, inits
    return build


def _gelu(*, tanh: bool, bias: str | None) -> Builder:
    """GELU as torch writes it at opset 18 (or the Gelu-20 op when bias == "onnx_gelu")."""
    def build(rng: np.random.Generator, hidden: int) -> Built:
        inits: list[onnx.TensorProto] = []
        nodes = []
        x = "x"
        if bias is not None:
            bias_name = _const(inits, "bias", rng.standard_normal(4 * hidden))
            nodes.append(helper.make_node("Add", ["x", bias_name], ["x_bias"]))
            x = "x_bias"
        if bias == "onnx_gelu":
            approximate = "tanh" if tanh else "none"
            nodes.append(helper.make_node("Gelu", [x], ["y"], approximate=approximate))
            return nodes, inits
        half = _const(inits, "half", 0.5)
        one = _const(inits, "one", 1.0)
        if tanh:
            k = _const(inits, "k", np.sqrt(2 / np.pi))
            nodes += [
                helper.make_node("Pow", [x, _const(inits, "three", 3.0)], ["cube"]),
                helper.make_node("Mul", [_const(inits, "c", 0.044715), "cube"], ["c_cube"]),
                helper.make_node("Add", [x, "c_cube"], ["inner"]),
                helper.make_node("Mul", [k, "inner"], ["scaled"]),
                helper.make_node("Tanh", ["scaled"], ["t"]),
                helper.make_node("Add", ["t", one], ["one_plus"]),
                helper.make_node("Mul", [half, "one_plus"], ["half_one_plus"]),
                helper.make_node("Mul", [x, "half_one_plus"], ["y"]),
            ]
        else:
            nodes += [
                helper.make_node("Div", [x, _const(inits, "sqrt2", np.sqrt(2.0))], ["scaled"]),
                helper.make_node("Erf", ["scaled"], ["e"]),
                helper.make_node("Add", ["e", one], ["one_plus"]),
                helper.make_node("Mul", [half, "one_plus"], ["half_one_plus"]),
                helper.make_node("Mul", [x, "half_one_plus"], ["y"]),
            ]
        return nodes, inits
    return build


# name -> (builder, pass, width of the activation in hidden sizes, has a skip input)
CASES: dict[str, tuple[Builder, FusionPass, int, bool]] = {
    "LayerNorm": (_layer_norm, FUSE_LAYER_NORM, 1, False),
    "Add+LN": (_skip_layer_norm(bias=False, keep_sum=False), FUSE_SKIP_LAYER_NORM, 1, True),
    "Add+bias+LN": (_skip_layer_norm(bias=True, keep_sum=False), FUSE_SKIP_LAYER_NORM, 1, True),
    "Add+LN, sum kept": (_skip_layer_norm(bias=False, keep_sum=True), FUSE_SKIP_LAYER_NORM, 1,
                         True),
    "GELU erf": (_gelu(tanh=False, bias=None), FUSE_GELU, 4, False),
    "GELU tanh": (_gelu(tanh=True, bias=None), FUSE_GELU, 4, False),
    "bias+GELU erf": (_gelu(tanh=False, bias="add"), FUSE_GELU, 4, False),
    "bias+GELU tanh": (_gelu(tanh=True, bias="add"), FUSE_GELU, 4, False),
    "bias+Gelu-20": (_gelu(tanh=False, bias="onnx_gelu"), FUSE_GELU, 4, False),
    "bias+Gelu-20 tanh": (_gelu(tanh=True, bias="onnx_gelu"), FUSE_GELU, 4, False),
}
# How often the pass fires where it is not once: the written-out GELU, then its bias Add.
FIRES = {"bias+GELU erf": 2, "bias+GELU tanh": 2}


def case_model(name: str, hidden: int, batch: int) -> onnx.ModelProto:
    builder, _, width, has_skip = CASES[name]
    nodes, inits = builder(np.random.default_rng(0), hidden)
    shape = [batch, SEQUENCE, width * hidden]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    if has_skip:
        inputs.append(helper.make_tensor_value_info("skip", TensorProto.FLOAT, shape))
    output = nodes[-1].output[0]
    graph = helper.make_graph(nodes, "bench", inputs,
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def bench_case(name: str, hidden: int, batch: int, level: OptimizationLevel,
               timing: Timing) -> float:
    original = case_model(name, hidden, batch)
    fused, _ = apply_pass(original, CASES[name][1], expect_count=FIRES.get(name, 1))
    speedups = fused_speedups(original, fused, random_inputs(original, seed=1), timing,
                              levels=[level], atol=1e-4, rtol=1e-4, batch_size=batch)
    return speedups[level]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser, iterations=30, threads=0, levels=["disabled"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    timing = Timing.from_args(args)
    configs = [(h, b) for h in HIDDEN for b in BATCHES]
    for level in args.levels:
        print(f"\nspeed-up of fused over unfused, ORT level {level!r}, sequence {SEQUENCE}, "
              f"median of {args.iterations} interleaved rounds")
        print(f"{'case':<19}" + "".join(f"{f'h{h} b{b}':>11}" for h, b in configs))
        for name in args.cases:
            ratios = [bench_case(name, hidden, batch, level, timing) for hidden, batch in configs]
            print(f"{name:<19}" + "".join(f"{r:>10.3f}x" for r in ratios), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
