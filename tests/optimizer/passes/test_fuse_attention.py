"""fuse_attention: head split → scaled Q·Kᵀ [+ mask] → Softmax → ·V → head merge into MHA."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.testing.attention_models import attention
from optimizer.testing.passes import (
    apply_pass,
    assert_outputs_close,
    op_types,
    random_inputs,
    run_model,
)

MHA = "com.microsoft.MultiHeadAttention"
PROJECTIONS = ["MatMul", "Add"] * 3  # Q, K and V projections stay
OUT_PROJECTION = ["MatMul", "Add"]


def refusals(report: object) -> list[str]:
    return [r.reason for s in report.rules for r in s.refusals]  # type: ignore[attr-defined]


# float16 outputs reach |5|, where one float16 step is 4e-3; the rounding order differs.
FP_TOLERANCES = [(np.float32, 1e-5, 1e-4), (np.float16, 1e-2, 1e-2)]


@pytest.mark.parametrize(("dtype", "atol", "rtol"), FP_TOLERANCES)
@pytest.mark.parametrize("scale_mode", ["div", "mul", "split", "query", "query_div", "none"])
def test_fuse_attention_matches_original(dtype: type, atol: float, rtol: float,
                                         scale_mode: str) -> None:
    model = attention(dtype=dtype, scale_mode=scale_mode)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + [MHA] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=atol, rtol=rtol)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), FP_TOLERANCES)
@pytest.mark.parametrize(
    ("mask", "mask_shape", "mask_ops"),
    [
        ("input", (2, 1, 1, 8), ["Expand"]),  # BERT's padding mask, broadcast over queries
        ("input", (2, 4, 8, 8), []),  # already [B, N, S, T]
        ("input", (1, 4, 8, 8), []),
        ("input", (8, 8), ["Reshape"]),
        ("const", (8, 8), []),  # a causal mask: folded into a [1, 1, S, T] constant
        ("const", (1, 1, 1, 8), []),
    ],
    ids=["B11T", "BNST", "1NST", "ST", "const-ST", "const-111T"],
)
def test_fuse_attention_with_additive_mask_matches_original(
    dtype: type, atol: float, rtol: float, mask: str, mask_shape: tuple[int, ...],
    mask_ops: list[str],
) -> None:
    model = attention(dtype=dtype, mask=mask, mask_shape=mask_shape, scale_mode="split",
                      key_form="reshape")
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + mask_ops + [MHA] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=atol, rtol=rtol)


def test_fuse_attention_float16_is_as_accurate_as_unfused() -> None:
    """Both float16 graphs against the float32 one (same weights and inputs, rounded)."""
    reference_model = attention(mask="input", scale_mode="split", key_form="reshape")
    model = attention(mask="input", scale_mode="split", key_form="reshape", dtype=np.float16)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    feeds = random_inputs(model)
    [reference] = run_model(reference_model, {k: v.astype(np.float32) for k, v in feeds.items()})
    [unfused_out] = run_model(model, feeds)
    [fused_out] = run_model(fused, feeds)
    unfused_error = np.abs(unfused_out.astype(np.float32) - reference).max()
    fused_error = np.abs(fused_out.astype(np.float32) - reference).max()
    assert fused_error <= 1.5 * unfused_error, (fused_error, unfused_error)


@pytest.mark.parametrize("key_form", ["perm0231", "twice", "reshape"])
def test_fuse_attention_accepts_each_key_transpose(key_form: str) -> None:
    model = attention(key_form=key_form, mask="input")
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert MHA in op_types(fused) and "Transpose" not in op_types(fused)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_handles_cross_attention_and_wider_values() -> None:
    model = attention(seq=6, kv_seq=10, v_head_dim=5, mask="input", mask_shape=(2, 1, 6, 10))
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + [MHA] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_uses_the_models_scale() -> None:
    model = attention(scale_mode="mul", scale_value=0.05)  # not 1/sqrt(head_dim), the op default
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_fuses_torch_dynamo_sdpa_export() -> None:
    """The node sequence torch 2.13's dynamo exporter writes for F.scaled_dot_product_attention
    with an additive [B, 1, 1, S] mask: allowzero head split/merge, Kᵀ via Reshape/Transpose/
    Reshape, Q and Kᵀ each multiplied by sqrt(1/sqrt(H))."""
    model = attention(scale_mode="split", key_form="reshape", mask="input", allowzero=1)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + ["Expand", MHA] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_accepts_mask_as_first_add_operand() -> None:
    model = attention(mask="input", mask_shape=(2, 4, 8, 8), mask_first=True)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_output_can_be_a_graph_output() -> None:
    model = attention(out_projection=False, mask="input")
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + ["Expand", MHA]
    assert [o.name for o in fused.graph.output] == ["attn"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_attention_keeps_a_reshape_for_other_merge_shapes() -> None:
    model = attention(merge_shape=[16, 32])  # [B*S, N*H], as a Gemm-based exporter writes
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + [MHA, "Reshape"] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def two_layers(model: onnx.ModelProto, shared: set[str]) -> onnx.ModelProto:
    """`model` applied twice ("x" → "y" → "y_2"), the second copy with its own weights except
    the initializers named in `shared`."""
    graph, inputs = model.graph, {value.name for value in model.graph.input}
    def rename(name: str) -> str:
        return "y" if name == "x" else name if name in inputs | shared or not name else f"{name}_2"
    for node in list(graph.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"{node.name}_2"
        copy.input[:] = [rename(n) for n in node.input]
        copy.output[:] = [rename(n) for n in node.output]
        graph.node.append(copy)
    for tensor in list(graph.initializer):
        if tensor.name not in shared:
            graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(tensor),
                                                             rename(tensor.name)))
    graph.output[0].name = "y_2"
    del graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def test_fuse_attention_shares_one_folded_causal_mask() -> None:
    model = two_layers(attention(mask="const", mask_shape=(8, 8)), shared={"mask"})
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=2)
    biases = [n.input[5] for n in fused.graph.node if n.op_type == "MultiHeadAttention"]
    assert biases == ["mask_attention_bias"] * 2  # one [1, 1, S, T] copy, not one per layer
    assert "mask" not in {t.name for t in fused.graph.initializer}  # the original is unused
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-4)


def test_fuse_attention_drops_inference_dropout() -> None:
    model = attention(dropout="inference", mask="input")
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert op_types(fused) == PROJECTIONS + ["Expand", MHA] + OUT_PROJECTION
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"softmax_axis": 2}, "is over axis 2"),
        ({"scale_as_input": True, "scale_mode": "mul"}, "is also a graph input"),
        ({"scale_as_input": True, "scale_mode": "mul", "mask": "input"}, "is also a graph input"),
        ({"scale_mode": "per_head"}, "has shape [1, 4, 1, 1]"),
        ({"softmax_axis": None, "opset": 12}, "is over axis 1"),
        ({"mask": "where"}, "masked by Where 'n_masked' (a select, not an additive mask)"),
        ({"mask": "input", "scale_mode": "after_mask"}, "would scale the mask too"),
        ({"mask": "input", "batch": 1, "mask_shape": (2, 1, 8, 8), "merge_shape": [-1, 8, 32]},
         "does not broadcast"),
        ({"dropout": "training"}, "training mode"),
        ({"scores_is_graph_output": True}, "'scaled' (Div output) is a graph output"),
        ({"probs_shared": True}, "'probs' (Softmax output) is also used by ReduceMax 'n_probs_max'"),
        ({"merge_perm": (0, 2, 3, 1)}, "has perm (0, 2, 3, 1)"),
        ({"scale_value": 0.0, "scale_mode": "mul"}, "scale is 0.0"),
        ({"infer_shapes": False, "mask": "input"}, "element type"),
    ],
    ids=["softmax-axis", "scale-is-input", "scale-is-input-masked", "per-head-scale",
         "softmax-opset12-default-axis", "where-mask", "scale-after-mask", "mask-grows-batch",
         "dropout-training", "scores-escape", "probs-shared", "merge-perm", "zero-scale",
         "no-shape-inference"],
)
def test_fuse_attention_refuses_unsafe_variants(variant: dict[str, Any], reason: str) -> None:
    model = attention(**variant)
    fused, report = apply_pass(model, FUSE_ATTENTION, expect_count=0)
    assert "Softmax" in op_types(fused) and MHA not in op_types(fused)
    assert any(reason in r for r in refusals(report)), refusals(report)


def test_fuse_attention_refuses_bfloat16() -> None:
    model = attention()
    for tensor in model.graph.initializer:
        if tensor.data_type == TensorProto.FLOAT:
            array = numpy_helper.to_array(tensor)
            tensor.CopyFrom(helper.make_tensor(tensor.name, TensorProto.BFLOAT16, array.shape,
                                               array.reshape(-1).tolist()))
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.BFLOAT16
    fused, report = apply_pass(model, FUSE_ATTENTION, expect_count=0)
    assert any("not float32 or float16" in r for r in refusals(report)), refusals(report)


def test_fuse_attention_has_no_tensorrt_lowering() -> None:
    assert not FUSE_ATTENTION.supports("tensorrt")  # needs a plugin or opset-23 Attention


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 12),
    heads=st.sampled_from([1, 2, 3, 4]),
    head_dim=st.sampled_from([1, 2, 4, 8, 16]),
    scale_mode=st.sampled_from(["div", "mul", "split", "none"]),
    key_form=st.sampled_from(["perm0231", "twice", "reshape"]),
    mask=st.sampled_from([None, "input", "const"]),
    seed=st.integers(0, 2**16),
)
def test_fuse_attention_is_equivalent_on_random_shapes(
    batch: int, seq: int, heads: int, head_dim: int, scale_mode: str, key_form: str,
    mask: str | None, seed: int,
) -> None:
    mask_shape = (batch, 1, 1, seq) if mask == "input" else (seq, seq)
    model = attention(batch=batch, seq=seq, heads=heads, head_dim=head_dim, scale_mode=scale_mode,
                      key_form=key_form, mask=mask, mask_shape=mask_shape, seed=seed)
    fused, _ = apply_pass(model, FUSE_ATTENTION, expect_count=1)
    assert MHA in op_types(fused) and "Softmax" not in op_types(fused)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)
