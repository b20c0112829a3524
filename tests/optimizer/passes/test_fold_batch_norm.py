"""fold_batch_norm: inference BatchNormalization folds into the Conv, ConvTranspose, Gemm or
MatMul before it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.fusion_report import FusionReport
from optimizer.passes.base import FusionPass
from optimizer.passes.fold_batch_norm import (
    FOLD_BATCH_NORM,
    FoldBatchNormIntoGemm,
    FoldBatchNormIntoMatMul,
)
from optimizer.testing.norm_models import conv_bn
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-2)])
@pytest.mark.parametrize("bias", [True, False])
def test_fold_batch_norm_into_conv_matches_original(dtype: type, atol: float, bias: bool) -> None:
    model = conv_bn(dtype=dtype, bias=bias)
    fused, _ = apply_pass(model, FOLD_BATCH_NORM, expect_count=1)
    assert op_types(fused) == ["Conv"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("group", [1, 2, 4])
def test_fold_batch_norm_into_grouped_conv_matches_original(group: int) -> None:
    model = conv_bn(group=group, in_channels=8)
    fused, _ = apply_pass(model, FOLD_BATCH_NORM, expect_count=1)
    assert op_types(fused) == ["Conv"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("group", [1, 2])
def test_fold_batch_norm_into_conv_transpose_matches_original(group: int) -> None:
    model = conv_bn(transpose=True, group=group, in_channels=4)
    fused, _ = apply_pass(model, FOLD_BATCH_NORM, expect_count=1)
    assert op_types(fused) == ["ConvTranspose"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fold_batch_norm_uses_the_models_epsilon() -> None:
    model = conv_bn(epsilon=0.5)  # a wrong (default) epsilon would be far off
    fused, _ = apply_pass(model, FOLD_BATCH_NORM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"training_mode": 1}, "training mode"),
        ({"params_as_inputs": True}, "graph input"),
        ({"conv_out_is_graph_output": True}, "graph output"),
        ({"share_weights": True}, "also used by node 'other_conv'"),
    ],
    ids=["training-mode", "non-constant-stats", "intermediate-is-output", "shared-weights"],
)
def test_fold_batch_norm_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = conv_bn(**variant)
    fused, report = apply_pass(model, FOLD_BATCH_NORM, expect_count=0)
    assert "BatchNormalization" in op_types(fused)
    if not variant.get("conv_out_is_graph_output") and not variant.get("training_mode"):
        [stats] = [s for s in report.rules if s.rule == "FoldBatchNormIntoConv"]
        assert any(reason in r.reason for r in stats.refusals), stats


def test_training_mode_zero_attribute_still_folds() -> None:
    fused, _ = apply_pass(conv_bn(training_mode=0), FOLD_BATCH_NORM, expect_count=1)
    assert op_types(fused) == ["Conv"]


@settings(max_examples=25, deadline=None)
@given(
    channels=st.sampled_from([1, 2, 3, 8, 16]),
    in_channels=st.sampled_from([1, 3, 4]),
    bias=st.booleans(),
    epsilon=st.floats(1e-6, 1e-1),
    seed=st.integers(0, 2**16),
    size=st.integers(3, 9),
)
def test_fold_batch_norm_is_equivalent_on_random_convs(
    channels: int, in_channels: int, bias: bool, epsilon: float, seed: int, size: int
) -> None:
    model = conv_bn(channels=channels, in_channels=in_channels, bias=bias, epsilon=epsilon,
                    seed=seed, size=size)
    fused, _ = apply_pass(model, FOLD_BATCH_NORM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-3, seed=seed)


# --- Gemm and MatMul ------------------------------------------------------------------------

TOLERANCES = [(np.float32, 1e-5), (np.float16, 2e-2)]

# Only the Gemm and MatMul rules, so that these tests see nothing else of FOLD_BATCH_NORM.
FOLD_BN_GEMM = FusionPass(
    name="fold_batch_norm_gemm_test",
    summary="test only",
    stage="conv_bn_act",
    rules={backend: [FoldBatchNormIntoGemm.rule(), FoldBatchNormIntoMatMul.rule()]
           for backend in ("onnxruntime", "tensorrt")},
)


def linear_bn(
    *, op: str = "Gemm", m: int = 5, k: int = 6, n: int = 4, dtype: type = np.float32,
    c_shape: tuple[int, ...] | None = (4,), trans_a: int = 0, trans_b: int = 0,
    alpha: float | None = None, beta: float | None = None, epsilon: float = 1e-5,
    x_rank: int = 2, seed: int = 0, training_mode: int | None = None,
    params_as_inputs: bool = False, out_is_graph_output: bool = False,
    share_weights: bool = False, param_shape: tuple[int, ...] | None = None,
    computed_weight: bool = False,
) -> onnx.ModelProto:
    """x → Gemm (or MatMul) → BatchNormalization → y, with random weights and statistics."""
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    x_shape = [k, m] if trans_a else [m, k]
    if x_rank == 3:
        x_shape = [2, m, k]
    w_shape = (n, k) if trans_b else (k, n)
    inits = [numpy_helper.from_array((rng.standard_normal(w_shape) / np.sqrt(k)).astype(dtype),
                                     "w_raw" if computed_weight else "w")]
    inputs = ["x", "w"]
    attrs: dict[str, float | int] = {}
    if op == "Gemm":
        attrs = {"transA": trans_a, "transB": trans_b}
        if alpha is not None:
            attrs["alpha"] = alpha
        if beta is not None:
            attrs["beta"] = beta
        if c_shape is not None:
            inits.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(dtype), "c"))
            inputs.append("c")
    shape = param_shape or (n,)
    bn_params = {
        "gamma": rng.uniform(0.5, 1.5, shape), "beta": rng.standard_normal(shape),
        "mean": rng.standard_normal(shape), "var": rng.uniform(0.5, 2.0, shape),
    }
    graph_inputs = [helper.make_tensor_value_info("x", elem, x_shape)]
    for name, values in bn_params.items():
        inits.append(numpy_helper.from_array(values.astype(dtype), name))
        if params_as_inputs and name == "var":
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
    bn_attrs: dict[str, float | int] = {"epsilon": epsilon}
    bn_outputs = ["y"]
    if training_mode is not None:
        bn_attrs["training_mode"] = training_mode
        if training_mode:
            bn_outputs = ["y", "running_mean", "running_var"]
    nodes = [helper.make_node("Identity", ["w_raw"], ["w"])] if computed_weight else []
    nodes += [
        helper.make_node(op, inputs, ["z"], name="linear", **attrs),
        helper.make_node("BatchNormalization", ["z", "gamma", "beta", "mean", "var"],
                         bn_outputs, name="bn", **bn_attrs),
    ]
    out_shape = [2, m, n] if x_rank == 3 else [m, n]
    outputs = [helper.make_tensor_value_info("y", elem, out_shape)]
    if out_is_graph_output:
        outputs.append(helper.make_tensor_value_info("z", elem, out_shape))
    if share_weights:
        nodes.append(helper.make_node(op, inputs, ["other"], name="other_linear", **attrs))
        outputs.append(helper.make_tensor_value_info("other", elem, out_shape))
    graph = helper.make_graph(nodes, "linear_bn", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def refusal_reasons(report: FusionReport, rule: str) -> list[str]:
    [stats] = [s for s in report.rules if s.rule == rule]
    return [r.reason for r in stats.refusals]


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("c_shape", [(4,), (1, 4), (5, 4), (5, 1), (), None],
                         ids=["c-n", "c-1n", "c-mn", "c-m1", "c-scalar", "no-c"])
def test_fold_batch_norm_into_gemm_matches_original(dtype: type, atol: float,
                                                    c_shape: tuple[int, ...] | None) -> None:
    model = linear_bn(dtype=dtype, c_shape=c_shape)
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=1)
    assert op_types(fused) == ["Gemm"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize(("alpha", "beta"), [(None, None), (0.7, 1.9), (2.5, 0.0)])
def test_fold_batch_norm_into_gemm_keeps_transposes_alpha_and_beta(
    trans_a: int, trans_b: int, alpha: float | None, beta: float | None
) -> None:
    model = linear_bn(trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta)
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=1)
    assert op_types(fused) == ["Gemm"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
def test_fold_batch_norm_into_matmul_becomes_gemm(dtype: type, atol: float) -> None:
    model = linear_bn(op="MatMul", dtype=dtype)
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=1)
    assert op_types(fused) == ["Gemm"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


def test_fold_batch_norm_into_matmul_of_unknown_rank_input_adds_the_bias() -> None:
    """x comes from a node with no shape recorded; only the MatMul output is known 2-D."""
    model = linear_bn(op="MatMul")
    model.graph.input[0].name = "x_in"
    model.graph.node.insert(0, helper.make_node("Relu", ["x_in"], ["x"]))
    model.graph.value_info.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [5, 4]))
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=1)
    assert op_types(fused) == ["Relu", "MatMul", "Add"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fold_batch_norm_gemm_uses_the_models_epsilon() -> None:
    model = linear_bn(epsilon=0.5)
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_training_mode_zero_attribute_still_folds_into_gemm() -> None:
    fused, _ = apply_pass(linear_bn(training_mode=0), FOLD_BN_GEMM, expect_count=1)
    assert op_types(fused) == ["Gemm"]


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"training_mode": 1}, None),
        ({"params_as_inputs": True}, "graph input"),
        ({"computed_weight": True}, "'w' is not a constant"),
        ({"out_is_graph_output": True}, None),
        ({"share_weights": True}, "also used by node 'other_linear'"),
    ],
    ids=["training-mode", "non-constant-stats", "computed-weight", "intermediate-is-output",
         "shared-weights"],
)
def test_fold_batch_norm_gemm_refuses_unsafe_variants(op: str, variant: dict,
                                                      reason: str | None) -> None:
    model = linear_bn(op=op, **variant)
    fused, report = apply_pass(model, FOLD_BN_GEMM, expect_count=0)
    assert "BatchNormalization" in op_types(fused)
    # Training mode (three outputs) and an escaping intermediate stop the matcher before check.
    if reason is not None:
        rule = "FoldBatchNormIntoGemm" if op == "Gemm" else "FoldBatchNormIntoMatMul"
        assert any(reason in r for r in refusal_reasons(report, rule)), report


def test_fold_batch_norm_refuses_matmul_of_rank_3() -> None:
    """On [B, S, N] BatchNormalization normalizes axis 1 (S), not MatMul's columns."""
    model = linear_bn(op="MatMul", x_rank=3, m=4, param_shape=(4,))
    fused, report = apply_pass(model, FOLD_BN_GEMM, expect_count=0)
    assert op_types(fused) == ["MatMul", "BatchNormalization"]
    assert any("not known to be 2-D" in r
               for r in refusal_reasons(report, "FoldBatchNormIntoMatMul"))


@settings(max_examples=25, deadline=None)
@given(
    op=st.sampled_from(["Gemm", "MatMul"]),
    m=st.integers(1, 6), k=st.integers(1, 9), n=st.integers(1, 9),
    c_kind=st.sampled_from(["n", "1n", "mn", "m1", "scalar", None]),
    trans_a=st.integers(0, 1), trans_b=st.integers(0, 1),
    alpha=st.floats(0.1, 3.0), beta=st.floats(0.0, 3.0),
    epsilon=st.floats(1e-6, 1e-1),
    extra=st.sampled_from([None, None, "out_is_graph_output", "share_weights"]),
    seed=st.integers(0, 2**16),
)
def test_fold_batch_norm_gemm_is_equivalent_on_random_layers(
    op: str, m: int, k: int, n: int, c_kind: str | None, trans_a: int, trans_b: int,
    alpha: float, beta: float, epsilon: float, extra: str | None, seed: int,
) -> None:
    c_shape = {"n": (n,), "1n": (1, n), "mn": (m, n), "m1": (m, 1), "scalar": (),
               None: None}[c_kind]
    gemm_only = {"trans_a": trans_a, "trans_b": trans_b, "alpha": alpha, "beta": beta}
    model = linear_bn(op=op, m=m, k=k, n=n, c_shape=c_shape, epsilon=epsilon, seed=seed,
                      **(gemm_only if op == "Gemm" else {}), **({extra: True} if extra else {}))
    fused, _ = apply_pass(model, FOLD_BN_GEMM, expect_count=0 if extra else 1)
    assert ("BatchNormalization" in op_types(fused)) == bool(extra)
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-3, seed=seed)
