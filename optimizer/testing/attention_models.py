"""Self-attention blocks written out as exporters write them (head split, scaled Q·Kᵀ, optional
mask, Softmax, ·V, head merge), and the unsafe variants the attention pass must refuse, for the
pass and plugin tests and bench/."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from optimizer.testing.graph_writer import GraphWriter
from optimizer.testing.models import IR_VERSION, NP_TO_ONNX

__all__ = ["attention"]


class _AttentionGraph(GraphWriter):
    """A GraphWriter that also writes the projections and head splits of one dtype."""

    def __init__(self, dtype: type, seed: int) -> None:
        super().__init__(seed)
        self.dtype = dtype

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.3) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(self.dtype))

    def linear(self, x: str, name: str, d_in: int, d_out: int) -> str:
        projected = self.node("MatMul", [x, self.weight(f"w_{name}", (d_in, d_out))], f"{name}_mm")
        return self.node("Add", [projected, self.weight(f"b_{name}", (d_out,), 1.0)], name)

    def split_heads(self, x: str, name: str, shape: list[int], perm: list[int],
                    allowzero: int = 0) -> str:
        split = self.node("Reshape", [x, self.const(f"{name}_shape", np.array(shape, np.int64))],
                          f"{name}_bsnh", **({"allowzero": 1} if allowzero else {}))
        return self.node("Transpose", [split], f"{name}_heads", perm=perm)


def attention(
    *, batch: int = 2, seq: int = 8, kv_seq: int | None = None, heads: int = 4,
    head_dim: int = 8, v_head_dim: int | None = None, dtype: type = np.float32,
    scale_mode: str = "div", key_form: str = "perm0231", mask: str | None = None,
    mask_shape: tuple[int, ...] | None = None, softmax_axis: int | None = -1,
    dropout: str | None = None,
    scale_as_input: bool = False, scale_value: float | None = None,
    scores_is_graph_output: bool = False, probs_shared: bool = False,
    merge_perm: tuple[int, ...] = (0, 2, 1, 3), merge_shape: list[int] | None = None,
    mask_first: bool = False, allowzero: int = 0, out_projection: bool = True, opset: int = 17,
    seed: int = 0, infer_shapes: bool = True,
) -> onnx.ModelProto:
    """A self-attention block (cross-attention when kv_seq differs) with random projections.

    scale_mode: "div"/"mul" scale the scores after Q·Kᵀ; "split" multiplies Q and Kᵀ by the
    square root each (torch's dynamo exporter); "query" (Mul(scale, Q)) and "query_div" scale Q
    only; "per_head" by a [1, N, 1, 1] vector; "none"; "after_mask" scales after the mask Add.
    key_form: "perm0231" (one Transpose), "twice" ([0,2,1,3] then [0,1,3,2]), "reshape"
    (Reshape/Transpose/Reshape, F.scaled_dot_product_attention's export).
    mask: None, "input" (a graph input), "const" (random, causal when [S, T]), "where" (a select
    mask). Other arguments build the unsafe variants the tests refuse.
    """
    kv_seq = seq if kv_seq is None else kv_seq
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    hidden = heads * head_dim
    g = _AttentionGraph(dtype, seed)
    elem = NP_TO_ONNX[dtype]
    inputs = [helper.make_tensor_value_info("x", elem, [batch, seq, hidden])]
    kv_source = "x"
    if kv_seq != seq:
        inputs.append(helper.make_tensor_value_info("memory", elem, [batch, kv_seq, hidden]))
        kv_source = "memory"
    q = g.split_heads(g.linear("x", "q", hidden, hidden), "q", [batch, seq, heads, head_dim],
                      [0, 2, 1, 3], allowzero)
    k_src = g.linear(kv_source, "k", hidden, hidden)
    v = g.split_heads(g.linear(kv_source, "v", hidden, heads * v_head_dim), "v",
                      [batch, kv_seq, heads, v_head_dim], [0, 2, 1, 3], allowzero)
    k_shape = [batch, kv_seq, heads, head_dim]
    if key_form == "perm0231":
        kt = g.split_heads(k_src, "k", k_shape, [0, 2, 3, 1], allowzero)
    elif key_form == "twice":
        kt = g.node("Transpose", [g.split_heads(k_src, "k", k_shape, [0, 2, 1, 3], allowzero)],
                    "kt", perm=[0, 1, 3, 2])
    else:
        k = g.split_heads(k_src, "k", k_shape, [0, 2, 1, 3], allowzero)
        flat = g.node("Reshape", [k, g.const("k_flat", np.array([-1, kv_seq, head_dim], np.int64))],
                      "k_flat3")
        flat_t = g.node("Transpose", [flat], "k_flat_t", perm=[0, 2, 1])
        kt = g.node("Reshape", [flat_t, g.const("kt_shape", np.array(
            [batch, heads, head_dim, kv_seq], np.int64))], "kt")
    scale = 1 / math.sqrt(head_dim) if scale_value is None else scale_value
    scale_name = "scale"
    if scale_mode in ("mul", "query", "after_mask"):
        g.const("scale", np.array(scale, dtype))
        if scale_as_input:  # the initializer is then only a default the caller may override
            inputs.append(helper.make_tensor_value_info("scale", elem, []))
    if scale_mode == "split":
        root = g.const("root_scale", np.array([math.sqrt(scale)], dtype))
        q = g.node("Mul", [q, root], "q_scaled")
        kt = g.node("Mul", [kt, root], "kt_scaled")
    elif scale_mode == "query":
        q = g.node("Mul", [scale_name, q], "q_scaled")
    elif scale_mode == "query_div":
        q = g.node("Div", [q, g.const("divisor", np.array(1 / scale, dtype))], "q_scaled")
    scores = g.node("MatMul", [q, kt], "scores")
    if scale_mode == "div":
        scores = g.node("Div", [scores, g.const("divisor", np.array(1 / scale, dtype))], "scaled")
    elif scale_mode == "mul":
        scores = g.node("Mul", [scores, scale_name], "scaled")
    elif scale_mode == "per_head":
        per_head = g.const("per_head", np.full((1, heads, 1, 1), scale, dtype))
        scores = g.node("Mul", [scores, per_head], "scaled")
    if mask is not None:
        shape = mask_shape or (batch, 1, 1, kv_seq)
        if mask == "input":
            inputs.append(helper.make_tensor_value_info("mask", elem, list(shape)))
            mask_name = "mask"
        elif mask == "const":
            values = g.rng.standard_normal(shape)
            if shape[-2:] == (seq, kv_seq):
                values += np.triu(np.full((seq, kv_seq), -np.inf), 1)  # causal
            mask_name = g.const("mask", values.astype(dtype))
        if mask == "where":
            inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, list(shape)))
            neg = g.const("neg", np.array(-1e4, dtype))
            scores = g.node("Where", ["keep", scores, neg], "masked")
        else:
            operands = [mask_name, scores] if mask_first else [scores, mask_name]
            scores = g.node("Add", operands, "masked")
    if scale_mode == "after_mask":
        scores = g.node("Mul", [scores, scale_name], "scaled")
    axis = {} if softmax_axis is None else {"axis": softmax_axis}  # None: the opset's default
    probs = g.node("Softmax", [scores], "probs", **axis)
    if dropout is not None:
        training = g.const("training", np.array(dropout == "training"))
        ratio = g.const("ratio", np.array(0.1, dtype))
        g.nodes.append(helper.make_node("Dropout", [probs, ratio, training],
                                        ["dropped", "keep_mask"], name="dropout", seed=0))
        probs = "dropped"
    ctx = g.node("MatMul", [probs, v], "ctx")
    merged = g.node("Transpose", [ctx], "merged", perm=list(merge_perm))
    out_shape = None if merge_shape else [batch, seq, hidden]  # a -1 may let the batch grow
    merge_shape = merge_shape or [batch, seq, heads * v_head_dim]
    flat = g.node("Reshape", [merged, g.const("merge_shape", np.array(merge_shape, np.int64))],
                  "attn", **({"allowzero": 1} if allowzero else {}))
    if out_projection:
        outputs = [helper.make_tensor_value_info(g.linear(flat, "y", heads * v_head_dim, hidden),
                                                 elem, out_shape)]
    else:
        outputs = [helper.make_tensor_value_info(flat, elem, None)]
    if scores_is_graph_output:
        outputs.append(helper.make_tensor_value_info(scores, elem, None))
    if probs_shared:
        g.node("ReduceMax", [probs], "probs_max", keepdims=0)
        outputs.append(helper.make_tensor_value_info("probs_max", elem, None))
    graph = helper.make_graph(g.nodes, "attention", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    # The optimize pipeline runs shape inference first (optimizer.model.shapes.fix_input_shapes).
    return onnx.shape_inference.infer_shapes(model, data_prop=True) if infer_shapes else model
