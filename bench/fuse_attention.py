"""Time com.microsoft.MultiHeadAttention (fuse_attention) against the unfused ops on ORT CPU.

Builds a BERT encoder in code exactly as torch's dynamo exporter writes a hand-written layer
with F.scaled_dot_product_attention (Q/K/V MatMul + Add → Reshape → Transpose, Kᵀ through
Reshape/Transpose/Reshape, Q and Kᵀ each multiplied by sqrt(1/sqrt(H)), additive padding mask
[B, 1, 1, S] computed from a 0/1 attention mask, then out projection, residual, LayerNormalization,
Gelu FFN, LayerNormalization), rewrites it with fuse_attention, checks the outputs agree, and
times original and fused interleaved in this process, at ORT optimization level "disabled" (only
our rewrite differs) and "all" (ORT's default, what users get). Prints the median of per-round
speed-ups (unfused time / fused time: above 1 means the fusion is faster; see bench/timing.py).

    .venv/bin/python -m bench.fuse_attention [--iterations 20] [--layers 1] [--threads 1]
        [--seq 128] [--batches 1 8]
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench.timing import Timing, add_timing_arguments, fused_speedups
from optimizer.backends.onnxruntime.runner import OptimizationLevel
from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.testing.graph_writer import GraphWriter
from optimizer.testing.passes import apply_pass

WIDTHS = ((256, 4), (768, 12))  # (hidden, heads): BERT-mini-ish and BERT-base
BATCHES = (1, 8)
LEVELS: tuple[OptimizationLevel, ...] = ("disabled", "all")


class _Builder(GraphWriter):
    def linear(self, x: str, name: str, d_in: int, d_out: int) -> str:
        w = self.const(f"{name}.w", (self.rng.standard_normal((d_in, d_out)) / math.sqrt(d_in))
                       .astype(np.float32))
        b = self.const(f"{name}.b", (self.rng.standard_normal(d_out) * 0.1).astype(np.float32))
        return self.node("Add", [self.node("MatMul", [x, w], f"{name}_mm"), b], name)

    def layer_norm(self, x: str, name: str, hidden: int) -> str:
        gamma = self.const(f"{name}.g", self.rng.uniform(0.5, 1.5, hidden).astype(np.float32))
        beta = self.const(f"{name}.b", (self.rng.standard_normal(hidden) * 0.1).astype(np.float32))
        return self.node("LayerNormalization", [x, gamma, beta], name, epsilon=1e-5, axis=-1)


def bert_encoder(batch: int, seq: int, hidden: int, heads: int, layers: int) -> onnx.ModelProto:
    """Inputs "x" [B, S, hidden] float32 and "attention_mask" [B, S] (1 keep, 0 pad)."""
    g, head = _Builder(0), hidden // heads
    split = g.const("split_shape", np.array([batch, seq, heads, head], np.int64))
    flat = g.const("k_flat_shape", np.array([-1, seq, head], np.int64))
    kt_shape = g.const("kt_shape", np.array([batch, heads, head, seq], np.int64))
    root = g.const("root_scale", np.array([math.sqrt(1 / math.sqrt(head))], np.float32))
    merge = g.const("merge_shape", np.array([batch, seq, hidden], np.int64))
    axes = g.const("axes", np.array([1, 2], np.int64))
    unsq = g.node("Unsqueeze", ["attention_mask", axes], "m4")
    keep = g.node("Sub", [g.const("one", np.array(1.0, np.float32)), unsq], "pad")
    bias = g.node("Mul", [keep, g.const("neg", np.array(-10000.0, np.float32))], "bias")
    x = "x"
    for i in range(layers):
        p = f"l{i}"
        qkv = {}
        for name in ("q", "k", "v"):
            heads_bsnh = g.node("Reshape", [g.linear(x, f"{p}.{name}", hidden, hidden), split],
                                f"{p}.{name}_bsnh", allowzero=1)
            qkv[name] = g.node("Transpose", [heads_bsnh], f"{p}.{name}_heads", perm=[0, 2, 1, 3])
        k3 = g.node("Reshape", [qkv["k"], flat], f"{p}.k3")
        kt = g.node("Reshape", [g.node("Transpose", [k3], f"{p}.k3t", perm=[0, 2, 1]), kt_shape],
                    f"{p}.kt")
        q = g.node("Mul", [qkv["q"], root], f"{p}.q_scaled")
        kt = g.node("Mul", [kt, root], f"{p}.kt_scaled")
        scores = g.node("Add", [g.node("MatMul", [q, kt], f"{p}.scores"), bias], f"{p}.masked")
        probs = g.node("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = g.node("MatMul", [probs, qkv["v"]], f"{p}.ctx")
        merged = g.node("Reshape", [g.node("Transpose", [ctx], f"{p}.ctx_t", perm=[0, 2, 1, 3]),
                                    merge], f"{p}.attn", allowzero=1)
        residual = g.node("Add", [x, g.linear(merged, f"{p}.o", hidden, hidden)], f"{p}.res1")
        x = g.layer_norm(residual, f"{p}.ln1", hidden)
        ffn = g.node("Gelu", [g.linear(x, f"{p}.f1", hidden, 4 * hidden)], f"{p}.gelu")
        residual = g.node("Add", [x, g.linear(ffn, f"{p}.f2", 4 * hidden, hidden)], f"{p}.res2")
        x = g.layer_norm(residual, f"{p}.ln2", hidden)
    g.node("Identity", [x], "y")
    graph = helper.make_graph(
        g.nodes, "bert",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [batch, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def bench_case(seq: int, hidden: int, heads: int, batch: int, layers: int,
               timing: Timing) -> dict[str, float]:
    original = bert_encoder(batch, seq, hidden, heads, layers)
    fused, _ = apply_pass(original, FUSE_ATTENTION, expect_count=layers)
    rng = np.random.default_rng(1)
    mask = np.ones((batch, seq), np.float32)
    mask[:, seq * 3 // 4:] = 0.0  # padded tail
    feeds = {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32),
             "attention_mask": mask}
    return fused_speedups(original, fused, feeds, timing, levels=LEVELS, atol=2e-4, rtol=1e-3,
                          batch_size=batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_timing_arguments(parser, iterations=20)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    args = parser.parse_args(argv)
    timing = Timing.from_args(args)
    print(f"BERT encoder, {args.layers} layer(s), seq {args.seq}, {args.iterations} interleaved "
          f"rounds, threads {timing.threads or 'default'}; speed-up = unfused / fused")
    print(f"{'hidden':>7}{'heads':>6}{'batch':>6}" + "".join(f"{'@' + lv:>12}" for lv in LEVELS))
    for hidden, heads in WIDTHS:
        for batch in args.batches:
            speedups = bench_case(args.seq, hidden, heads, batch, args.layers, timing)
            print(f"{hidden:>7}{heads:>6}{batch:>6}"
                  + "".join(f"{speedups[lv]:>11.3f}x" for lv in LEVELS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
