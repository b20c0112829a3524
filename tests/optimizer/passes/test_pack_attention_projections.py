"""pack_attention_projections: Q/K/V Gemms + MultiHeadAttention → com.microsoft.Attention."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.model.graphs import op_histogram
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes.pack_attention_projections import PACK_ATTENTION_PROJECTIONS
from optimizer.testing import real_models
from optimizer.testing.passes import apply_pass, assert_outputs_close

BATCH, SEQ, HIDDEN, HEADS = 2, 5, 8, 2


def projected_attention(*, kv_from: str = "x", transposed: str = "", bias: bool = False,
                        padding_mask: bool = False, seed: int = 0) -> onnx.ModelProto:
    """What the passes leave of self-attention: per projection Reshape(x) → Gemm → Reshape →
    MultiHeadAttention (random weights and biases; `transposed` names projections whose Gemm
    reads W transposed)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], [
        numpy_helper.from_array(np.array([BATCH * SEQ, HIDDEN], np.int64), "rows"),
        numpy_helper.from_array(np.array([BATCH, SEQ, HIDDEN], np.int64), "bsh")]
    for p in "qkv":
        source = "x" if p == "q" else kv_from
        w = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) * 0.3
        inits += [numpy_helper.from_array(w.T.copy() if p in transposed else w, f"w{p}"),
                  numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), f"b{p}")]
        nodes += [helper.make_node("Reshape", [source, "rows"], [f"{p}_rows"]),
                  helper.make_node("Gemm", [f"{p}_rows", f"w{p}", f"b{p}"], [f"{p}_proj"],
                                   transB=int(p in transposed)),
                  helper.make_node("Reshape", [f"{p}_proj", "bsh"], [p])]
    inputs = ["q", "k", "v"]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN])]
    if kv_from != "x":
        graph_inputs.append(helper.make_tensor_value_info(kv_from, TensorProto.FLOAT,
                                                          [BATCH, SEQ, HIDDEN]))
    if bias or padding_mask:
        inputs += ["", "key_padding" if padding_mask else "", "bias" if bias else ""]
    if bias:
        graph_inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT,
                                                          [BATCH, HEADS, SEQ, SEQ]))
    if padding_mask:
        graph_inputs.append(helper.make_tensor_value_info("key_padding", TensorProto.INT32,
                                                          [BATCH, SEQ]))
    nodes.append(helper.make_node("MultiHeadAttention", inputs, ["out"], domain="com.microsoft",
                                  num_heads=HEADS, scale=0.4))
    graph = helper.make_graph(nodes, "attention", graph_inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                                             [BATCH, SEQ, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("transposed", ["", "kv", "qkv"])
@pytest.mark.parametrize("bias", [False, True])
def test_self_attention_packs_into_one_attention_op_with_the_same_outputs(transposed, bias):
    model = projected_attention(transposed=transposed, bias=bias)

    fused, _ = apply_pass(model, PACK_ATTENTION_PROJECTIONS, expect_count=1)

    assert op_histogram(fused) == {"com.microsoft.Attention": 1}
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_cross_attention_is_refused_with_its_reason():
    fused, report = apply_pass(projected_attention(kv_from="memory"), PACK_ATTENTION_PROJECTIONS,
                               expect_count=0)

    [stats] = [s for s in report.rules if s.rule == "PackAttentionProjections"]
    assert "cross-attention" in stats.refusals[0].reason
    assert "com.microsoft.MultiHeadAttention" in op_histogram(fused)


def test_a_key_padding_mask_is_refused_since_attention_reads_masks_differently():
    _, report = apply_pass(projected_attention(padding_mask=True), PACK_ATTENTION_PROJECTIONS,
                           expect_count=0)

    [stats] = [s for s in report.rules if s.rule == "PackAttentionProjections"]
    assert "key padding mask" in stats.refusals[0].reason


@pytest.mark.parametrize("form", ["dynamo", "torchscript", "dynamo_opset20"])
def test_a_bert_encoder_ends_with_packed_attention_in_every_layer(form):
    model = real_models.bert_encoder(layers=2, hidden=64, heads=2, seq=16, form=form)

    fused, report = optimize_model(model, OptimizeOptions(backend="onnxruntime"))

    ops = op_histogram(fused)
    assert report.applied("PackAttentionProjections") == 2
    assert ops["com.microsoft.Attention"] == 2 and "com.microsoft.MultiHeadAttention" not in ops
    assert_outputs_close(model, fused, atol=2e-4, rtol=1e-3)
