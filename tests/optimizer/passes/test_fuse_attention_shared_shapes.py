"""Attention whose Reshape targets are shared, as torch's dynamo exporter writes a transformers
BertModel: the fusion removes the attention ops, not the shape tensors, so those may have other
readers; an intermediate the fusion removes still may not.

The dynamo exporter reads the symbolic batch and sequence sizes off the input once and reuses one
shape tensor for every view of the same dims: one [B, S, N, H] target feeds the Q, K and V head
splits of every layer, one [B, S, N*H] target every head merge (and any other view to those dims).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.passes.fuse_to_plugins import FUSE_TO_PLUGINS
from optimizer.plugins import decompose_for_onnxruntime
from optimizer.testing.graph_writer import GraphWriter
from optimizer.testing.passes import apply_pass, op_types, run_model

HEADS, HEAD_DIM = 4, 8
HIDDEN = HEADS * HEAD_DIM
MHA = "com.microsoft.MultiHeadAttention"


class _Writer(GraphWriter):
    def linear(self, x: str, name: str) -> str:
        w = self.const(f"w_{name}", (self.rng.standard_normal((HIDDEN, HIDDEN)) * 0.3)
                       .astype(np.float32))
        b = self.const(f"b_{name}", self.rng.standard_normal(HIDDEN).astype(np.float32))
        return self.node("Add", [self.node("MatMul", [x, w], f"{name}_mm"), b], name)


def shared_target_layers(*, layers: int = 2, dynamic: bool = True, probs_output: bool = False,
                         merge_reads_intermediate: bool = False, nan_guard: float | None = None,
                         flat_key: bool = False, seed: int = 0) -> onnx.ModelProto:
    """`layers` self-attention layers (x → y) in the SDPA form of torch 2.13's dynamo exporter:
    Q and Kᵀ each scaled by sqrt(1/sqrt(H)), Kᵀ as the head split then Transpose [0, 1, 3, 2],
    an additive [B, 1, 1, S] mask. After the layers, one more Reshape to [B, S, N*H] (a view
    outside any attention block) reuses the head merge's target.

    dynamic: batch and seq are dynamic and the targets are Concat(Shape(x)[0:2], tail), read
    once; else static and each target is one Constant node.
    probs_output: layer 0's Softmax output is also a graph output (a shared intermediate).
    merge_reads_intermediate: the shared merge target reads its [B, S] off layer 0's head
    merge Transpose output, so the outside view keeps that intermediate alive.
    nan_guard: the weights go through Where(IsNaN(w), nan_guard, w), as torch's SDPA export
    writes with 0 (a row whose keys are all masked by -inf has NaN weights).
    flat_key: Kᵀ as torch's SDPA export writes it with dynamic dims: Reshape to [-1, T, H] →
    Transpose [0, 2, 1] → Reshape to [B, N, H, T], the targets sliced from Shape(K).
    """
    batch, seq = ("batch", "seq") if dynamic else (2, 8)
    g = _Writer(seed)
    if dynamic:
        lead = g.node("Shape", ["x"], "lead", start=0, end=2)
        split = g.node("Concat", [lead, g.const("split_tail", np.array([HEADS, HEAD_DIM]))],
                       "split_shape", axis=0)
        merge = g.node("Concat", [lead, g.const("merge_tail", np.array([HIDDEN]))],
                       "merge_shape", axis=0)
    else:
        split = g.node("Constant", [], "split_shape", value=numpy_helper.from_array(
            np.array([batch, seq, HEADS, HEAD_DIM], np.int64)))
        merge = g.node("Constant", [], "merge_shape", value=numpy_helper.from_array(
            np.array([batch, seq, HIDDEN], np.int64)))
    root_scale = g.const("root_scale", np.array(math.sqrt(1 / math.sqrt(HEAD_DIM)), np.float32))
    x, outputs = "x", []
    for i in range(layers):
        heads = {}
        for part in ("q", "k", "v"):
            split_view = g.node("Reshape", [g.linear(x, f"{part}{i}"), split], f"{part}{i}_bsnh",
                                allowzero=1)
            heads[part] = g.node("Transpose", [split_view], f"{part}{i}_heads", perm=[0, 2, 1, 3])
        if flat_key:
            kt = _flat_transposed_key(g, heads["k"], f"k{i}")
        else:
            kt = g.node("Transpose", [heads["k"]], f"kt{i}", perm=[0, 1, 3, 2])
        q = g.node("Mul", [heads["q"], root_scale], f"q{i}_scaled")
        kt = g.node("Mul", [kt, root_scale], f"kt{i}_scaled")
        scores = g.node("Add", [g.node("MatMul", [q, kt], f"scores{i}"), "mask"], f"masked{i}")
        probs = g.node("Softmax", [scores], f"probs{i}", axis=-1)
        if probs_output and i == 0:
            outputs.append(helper.make_tensor_value_info(probs, TensorProto.FLOAT,
                                                         [batch, HEADS, seq, seq]))
        if nan_guard is not None:
            is_nan = g.node("IsNaN", [probs], f"probs{i}_nan")
            fill = g.const(f"nan_fill{i}", np.array(nan_guard, np.float32))
            probs = g.node("Where", [is_nan, fill, probs], f"probs{i}_guarded")
        ctx = g.node("MatMul", [probs, heads["v"]], f"ctx{i}")
        merged = g.node("Transpose", [ctx], f"merged{i}", perm=[0, 2, 1, 3])
        if merge_reads_intermediate and i == 0:
            lead = g.node("Shape", [merged], "merged_lead", start=0, end=2)
            merge = g.node("Concat", [lead, g.const("merge_tail0", np.array([HIDDEN]))],
                           "merge_shape0", axis=0)
        attended = g.node("Reshape", [merged, merge], f"attn{i}", allowzero=1)
        x = g.node("Add", [x, g.linear(attended, f"o{i}")], f"y{i}")
    g.node("Reshape", [x, merge], "y", allowzero=1)
    outputs.insert(0, helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, HIDDEN]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, HIDDEN]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, 1, seq])]
    graph = helper.make_graph(g.nodes, "shared_targets", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _flat_transposed_key(g: _Writer, key: str, name: str) -> str:
    """Kᵀ for K [B, N, T, H], as torch 2.13 writes it for SDPA with dynamic dims."""
    shape = g.node("Shape", [key], f"{name}_shape", start=0)
    bound = {v: g.const(f"{name}_at{v}", np.array([v], np.int64))
             for v in (-1, -2, 0, 2**63 - 1)}

    def part(start: int, end: int, what: str) -> str:
        return g.node("Slice", [shape, bound[start], bound[end]], f"{name}_{what}")

    head_size, seq, lead = part(-1, 2**63 - 1, "h"), part(-2, -1, "t"), part(0, -2, "bn")
    flat = g.node("Reshape", [key, g.node("Concat", [bound[-1], seq, head_size],
                                          f"{name}_flat_shape", axis=0)], f"{name}_flat")
    flat_t = g.node("Transpose", [flat], f"{name}_flat_t", perm=[0, 2, 1])
    target = g.node("Concat", [lead, head_size, seq], f"{name}_kt_shape", axis=0)
    return g.node("Reshape", [flat_t, target], f"{name}_kt")


def _feeds(batch: int, seq: int, seed: int = 0, masked: float = -10000.0,
           fully_masked_row: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[..., (3 * seq) // 4:] = masked
    if fully_masked_row:
        mask[0] = masked  # every key of the first sequence is padding
    return {"x": rng.standard_normal((batch, seq, HIDDEN)).astype(np.float32), "mask": mask}


def _assert_same_outputs(original: onnx.ModelProto, fused: onnx.ModelProto,
                         shapes: list[tuple[int, int]], **feed_options: Any) -> None:
    for batch, seq in shapes:
        feeds = _feeds(batch, seq, **feed_options)
        for want, got in zip(run_model(original, feeds), run_model(fused, feeds), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def _reasons(report: Any) -> list[str]:
    return [r.reason for stats in report.rules for r in stats.refusals]


@pytest.mark.parametrize("dynamic", [True, False], ids=["concat-of-shape", "constant-node"])
def test_fuse_attention_fuses_every_layer_when_one_target_feeds_q_k_v_and_other_views(
        dynamic: bool) -> None:
    model = shared_target_layers(dynamic=dynamic)
    fused, report = apply_pass(model, FUSE_ATTENTION)
    assert op_types(fused).count(MHA) == 2, _reasons(report)
    assert "Softmax" not in op_types(fused)
    # The shared targets stay for the view after the layers; nothing else reads them now.
    assert op_types(fused)[-1] == "Reshape"
    _assert_same_outputs(model, fused, [(2, 8), (1, 5), (3, 16)] if dynamic else [(2, 8)])
    onnx.checker.check_model(fused, full_check=True)


def test_plugin_attention_fuses_every_layer_when_one_target_feeds_q_k_v() -> None:
    model = shared_target_layers()
    fused, report = apply_pass(model, FUSE_TO_PLUGINS, backend="tensorrt")
    assert op_types(fused).count("fuseforge.MultiHeadAttention") == 2, _reasons(report)
    _assert_same_outputs(model, decompose_for_onnxruntime(fused), [(2, 8), (1, 5)])


def test_fuse_attention_refuses_a_layer_whose_softmax_output_is_a_graph_output() -> None:
    model = shared_target_layers(probs_output=True)
    fused, report = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused).count("Softmax") == 1  # layer 0 stays as it was, layer 1 fuses
    assert any("'probs0' (Softmax output) is a graph output" in r for r in _reasons(report))
    _assert_same_outputs(model, fused, [(2, 8), (1, 5)])


def test_fuse_attention_refuses_when_a_shared_target_reads_an_intermediate() -> None:
    """The target read off layer 0's merge Transpose also feeds the views after it: fusing
    would leave that Transpose (and all above it) computed for the Shape alone."""
    model = shared_target_layers(merge_reads_intermediate=True)
    fused, report = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused).count("Softmax") == 1
    assert any("'merged0' (Transpose output) is also used by Shape 'n_merged_lead'" in r
               for r in _reasons(report)), _reasons(report)
    _assert_same_outputs(model, fused, [(2, 8), (1, 5)])


def test_fuse_attention_keeps_sdpas_nan_guard_for_fully_masked_rows() -> None:
    """With a -inf mask (torch's SDPA export turns a boolean mask into one), a sequence whose keys
    are all padding has NaN weights, which the guard makes 0 (and so its attention output 0);
    the fused op gives NaN there, so the guard moves onto its output."""
    model = shared_target_layers(nan_guard=0.0)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=2)
    assert op_types(fused).count(MHA) == 2 and "Softmax" not in op_types(fused)
    assert op_types(fused).count("IsNaN") == 2  # one guard per fused op, on its output
    original_out = run_model(model, _feeds(2, 8, masked=-np.inf, fully_masked_row=True))[0]
    assert not np.isnan(original_out).any()  # what the guard is for
    _assert_same_outputs(model, fused, [(2, 8), (1, 5)], masked=-np.inf, fully_masked_row=True)
    _assert_same_outputs(model, fused, [(2, 8)])  # and with no row fully masked


def test_plugin_attention_keeps_sdpas_nan_guard_for_fully_masked_rows() -> None:
    model = shared_target_layers(nan_guard=0.0)
    fused, report = apply_pass(model, FUSE_TO_PLUGINS, backend="tensorrt")
    assert op_types(fused).count("fuseforge.MultiHeadAttention") == 2, _reasons(report)
    _assert_same_outputs(model, decompose_for_onnxruntime(fused), [(2, 8)], masked=-np.inf,
                         fully_masked_row=True)


def test_fuse_attention_refuses_a_guard_that_writes_other_than_zero() -> None:
    model = shared_target_layers(nan_guard=0.5)
    fused, report = apply_pass(model, FUSE_ATTENTION, expect_count=0)
    assert any("replaces NaN weights by [0.5], not 0" in r for r in _reasons(report)), \
        _reasons(report)


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
def test_attention_fuses_sdpas_dynamic_flattened_key_transpose(backend: str) -> None:
    """torch's SDPA export with dynamic dims: the NaN guard, and Kᵀ through [-1, T, H] with the
    targets sliced (negative starts) from Shape(K)."""
    model = shared_target_layers(flat_key=True, nan_guard=0.0)
    fusion_pass = FUSE_ATTENTION if backend == "onnxruntime" else FUSE_TO_PLUGINS
    fused, report = apply_pass(model, fusion_pass, backend=backend)
    op = MHA if backend == "onnxruntime" else "fuseforge.MultiHeadAttention"
    assert op_types(fused).count(op) == 2, _reasons(report)
    assert not {"Softmax", "Transpose", "Slice"} & set(op_types(fused))
    runnable = fused if backend == "onnxruntime" else decompose_for_onnxruntime(fused)
    _assert_same_outputs(model, runnable, [(2, 8), (1, 5), (3, 16)])
    _assert_same_outputs(model, runnable, [(2, 8)], masked=-np.inf, fully_masked_row=True)
