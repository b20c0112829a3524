"""Time com.microsoft.FusedConv (and Conv + QuickGelu for SiLU) against the unfused ops on ORT CPU.

For each realistic conv shape (3x3, stride 1, padding 1, channels in = out) and batch size it
builds one small model per activation, plus a ResNet basic-block tail for Conv + Add + Relu,
rewrites it with fuse_conv_activation / fuse_conv_add_relu, checks the outputs agree, and times
original and fused interleaved in this process. The primary figure is at ORT optimization level
"disabled" (so only our rewrite differs); "--levels disabled all" adds the level FuseForge builds
engines at, where ORT fuses the original itself. Prints the median of per-round speed-ups
(unfused time / fused time: above 1 means the fusion is faster; see bench/timing.py).

    .venv/bin/python -m bench.fuse_conv_activation [--iterations 60] [--levels disabled all] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.timing import Timing, add_timing_arguments, fused_speedups
from optimizer.backends.onnxruntime.runner import OptimizationLevel
from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_conv_activation import FUSE_CONV_ACTIVATION
from optimizer.passes.fuse_conv_add_relu import FUSE_CONV_ADD_RELU
from optimizer.testing.passes import apply_pass, random_inputs

SHAPES = ((64, 56), (256, 14))  # (channels, height = width): ResNet stages 1 and 3
BATCHES = (1, 8)

Tail = Callable[[list[onnx.NodeProto], list[onnx.TensorProto]], None]


def _act(op: str, **attrs: Any) -> Tail:
    def add(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> None:
        nodes.append(helper.make_node(op, ["c"], ["y"], **attrs))
    return add


def _relu6(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> None:
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))


def _silu(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> None:
    nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]


def _residual(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> None:
    nodes += [helper.make_node("Add", ["c", "skip"], ["sum"]),
              helper.make_node("Relu", ["sum"], ["y"])]


def _residual_from_graph_input(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> None:
    nodes += [helper.make_node("Add", ["c", "x"], ["sum"]),
              helper.make_node("Relu", ["sum"], ["y"])]


Fuser = Callable[[onnx.ModelProto], onnx.ModelProto]


def _by(fusion_pass: FusionPass) -> Fuser:
    def fuse(model: onnx.ModelProto) -> onnx.ModelProto:
        return apply_pass(model, fusion_pass, expect_count=1)[0]
    return fuse


def _by_hand_with_graph_input_z(model: onnx.ModelProto) -> onnx.ModelProto:
    """The FusedConv fuse_conv_add_relu refuses to write (Z a graph input), to show why."""
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    del fused.graph.node[1:]
    fused.graph.node.append(helper.make_node("FusedConv", ["skip", "w", "b", "x"], ["y"],
                                             domain="com.microsoft", activation="Relu",
                                             pads=[1, 1, 1, 1]))
    fused.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return fused


CASES: dict[str, tuple[Tail, Fuser]] = {
    "Relu": (_act("Relu"), _by(FUSE_CONV_ACTIVATION)),
    "Clip(0,6)": (_relu6, _by(FUSE_CONV_ACTIVATION)),
    "LeakyRelu": (_act("LeakyRelu", alpha=0.1), _by(FUSE_CONV_ACTIVATION)),
    "Sigmoid": (_act("Sigmoid"), _by(FUSE_CONV_ACTIVATION)),
    "HardSigmoid": (_act("HardSigmoid"), _by(FUSE_CONV_ACTIVATION)),
    "Tanh": (_act("Tanh"), _by(FUSE_CONV_ACTIVATION)),
    "SiLU": (_silu, _by(FUSE_CONV_ACTIVATION)),
    "Add+Relu": (_residual, _by(FUSE_CONV_ADD_RELU)),
    # Z is the graph input: refused by the pass, timed here to show what the refusal avoids.
    "Add(x)+Relu": (_residual_from_graph_input, _by_hand_with_graph_input_z),
}


def conv_model(tail: Tail, channels: int, size: int, batch: int) -> onnx.ModelProto:
    """x → Conv1x1 → Conv3x3 → tail. The residual ("skip") is the 1x1 conv's output: as in a
    ResNet block it is an intermediate, which ORT's layout transforms at level "all" can reach."""
    rng = np.random.default_rng(0)
    c = channels
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32), "w0"),
        numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["skip"]),
             helper.make_node("Conv", ["skip", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    tail(nodes, inits)
    shape = [batch, c, size, size]
    graph = helper.make_graph(nodes, "bench",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def bench_case(name: str, channels: int, size: int, batch: int, level: OptimizationLevel,
               timing: Timing) -> float:
    tail, fuse = CASES[name]
    original = conv_model(tail, channels, size, batch)
    speedups = fused_speedups(original, fuse(original), random_inputs(original, seed=1), timing,
                              levels=[level], atol=1e-4, rtol=1e-4, batch_size=batch)
    return speedups[level]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser, iterations=60, levels=["disabled"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    timing = Timing.from_args(args)
    configs = [(c, s, b) for c, s in SHAPES for b in BATCHES]
    for level in args.levels:
        print(f"\nspeed-up of fused over unfused, ORT level {level!r}, {args.threads or 'default'} "
              f"thread(s), median of {args.iterations} interleaved rounds")
        print(f"{'case':<13}" + "".join(f"{f'{c}ch {s}x{s} b{b}':>18}" for c, s, b in configs))
        for name in args.cases:
            ratios = [bench_case(name, c, s, b, level, timing) for c, s, b in configs]
            print(f"{name:<13}" + "".join(f"{r:>17.3f}x" for r in ratios), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
