"""fold_batch_norm: Conv/ConvTranspose + inference BatchNormalization fold into one conv."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_conv_bn import FOLD_BATCH_NORM
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def conv_bn(
    *, channels: int = 8, in_channels: int = 4, dtype: type = np.float32, bias: bool = True,
    group: int = 1, epsilon: float = 1e-5, transpose: bool = False, seed: int = 0,
    training_mode: int | None = None, params_as_inputs: bool = False,
    conv_out_is_graph_output: bool = False, share_weights: bool = False, size: int = 6,
) -> onnx.ModelProto:
    """x → Conv (or ConvTranspose) → BatchNormalization → y, with random weights and statistics."""
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    if transpose:
        w_shape = (in_channels, channels // group, 3, 3)
    else:
        w_shape = (channels, in_channels // group, 3, 3)
    inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(dtype) * 0.3, "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(dtype), "b"))
        conv_inputs.append("b")
    bn_params = {
        "gamma": rng.uniform(0.5, 1.5, channels), "beta": rng.standard_normal(channels),
        "mean": rng.standard_normal(channels), "var": rng.uniform(0.5, 2.0, channels),
    }
    graph_inputs = [helper.make_tensor_value_info("x", elem, [1, in_channels, size, size])]
    for name, values in bn_params.items():
        if params_as_inputs and name == "mean":
            graph_inputs.append(helper.make_tensor_value_info(name, elem, [channels]))
            inits.append(numpy_helper.from_array(values.astype(dtype), name))  # default value
        else:
            inits.append(numpy_helper.from_array(values.astype(dtype), name))
    bn_attrs = {"epsilon": epsilon}
    bn_outputs = ["y"]
    if training_mode is not None:
        bn_attrs["training_mode"] = training_mode
        if training_mode:
            bn_outputs = ["y", "running_mean", "running_var"]
    nodes = [
        helper.make_node("ConvTranspose" if transpose else "Conv", conv_inputs, ["c"],
                         pads=[1, 1, 1, 1], group=group, name="conv"),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], bn_outputs,
                         name="bn", **bn_attrs),
    ]
    out_shape = [1, channels, size, size]  # 3x3 kernels with padding 1 keep the size
    outputs = [helper.make_tensor_value_info("y", elem, out_shape)]
    if conv_out_is_graph_output:
        outputs.append(helper.make_tensor_value_info("c", elem, out_shape))
    if share_weights:
        nodes.append(helper.make_node("Conv", ["x", "w"], ["other"], pads=[1, 1, 1, 1],
                                      group=group, name="other_conv"))
        outputs.append(helper.make_tensor_value_info("other", elem, out_shape))
    graph = helper.make_graph(nodes, "conv_bn", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


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
