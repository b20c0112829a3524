"""fuse_conv_add_relu: Conv + residual Add + Relu → com.microsoft.FusedConv with Z."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_conv_add_relu import FUSE_CONV_ADD_RELU
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
UNFUSED = ["Conv", "Neg", "Add", "Relu"]  # the default model: its residual is Neg(z_in)


def conv_add_relu(
    *, channels: int = 8, in_channels: int = 4, batch: int = 2, size: int = 6,
    dtype: type = np.float32, bias: bool = True, conv_first: bool = True, strides: int = 1,
    residual: str = "computed", residual_shape: list[int | str] | None = None, seed: int = 0,
    infer_shapes: bool = True, symbolic_batch: bool = False,
    conv_out_is_graph_output: bool = False, sum_is_graph_output: bool = False,
    sum_has_other_consumer: bool = False, residual_read_later: bool = False,
) -> onnx.ModelProto:
    """x → Conv → Add(residual) → Relu → y, random weights and bias, shapes inferred.

    residual: "computed" (Neg of a graph input), "conv" (a second Conv of x, as in a ResNet
    downsampling block), "self" (the conv output added to itself), "graph_input" or
    "initializer" (not computed by a node), "identity_of_input" (Identity of a graph input).
    """
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    out_size = (size - 1) // strides + 1  # 3x3 kernel, padding 1
    batch_dim: int | str = "N" if symbolic_batch else batch
    out_shape = [batch_dim, channels, out_size, out_size]
    inits = [numpy_helper.from_array(rng.standard_normal((channels, in_channels, 3, 3)).astype(dtype), "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(dtype), "b"))
        conv_inputs.append("b")
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1],
                              strides=[strides, strides], name="conv")]
    inputs = [helper.make_tensor_value_info("x", elem, [batch_dim, in_channels, size, size])]
    z = {"conv": "shortcut", "self": "c"}.get(residual, "z")
    if residual == "computed":
        inputs.append(helper.make_tensor_value_info("z_in", elem, residual_shape or out_shape))
        nodes.append(helper.make_node("Neg", ["z_in"], ["z"], name="residual"))
    elif residual == "graph_input":
        inputs.append(helper.make_tensor_value_info("z", elem, out_shape))
    elif residual == "identity_of_input":
        inputs.append(helper.make_tensor_value_info("z_in", elem, out_shape))
        nodes.append(helper.make_node("Identity", ["z_in"], ["z"], name="residual"))
    elif residual == "initializer":
        inits.append(numpy_helper.from_array(rng.standard_normal(out_shape).astype(dtype), "z"))
    elif residual == "conv":
        inits.append(numpy_helper.from_array(
            rng.standard_normal((channels, in_channels, 1, 1)).astype(dtype), "w_short"))
        nodes.append(helper.make_node("Conv", ["x", "w_short"], ["shortcut"],
                                      strides=[strides, strides], name="shortcut_conv"))
    nodes += [helper.make_node("Add", ["c", z] if conv_first else [z, "c"], ["s"], name="add"),
              helper.make_node("Relu", ["s"], ["y"], name="relu")]
    outputs = [helper.make_tensor_value_info("y", elem, out_shape)]
    if conv_out_is_graph_output:
        outputs.append(helper.make_tensor_value_info("c", elem, out_shape))
    if sum_is_graph_output:
        outputs.append(helper.make_tensor_value_info("s", elem, out_shape))
    if residual_read_later:  # after the fused node, so a Z buffer reused for Y would show
        nodes.append(helper.make_node("Sigmoid", [z], ["z_again"], name="later_reader"))
        outputs.append(helper.make_tensor_value_info("z_again", elem, out_shape))
    if sum_has_other_consumer:
        nodes.append(helper.make_node("Neg", ["s"], ["other"], name="other_user"))
        outputs.append(helper.make_tensor_value_info("other", elem, out_shape))
    graph = helper.make_graph(nodes, "conv_add_relu", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True) if infer_shapes else model


def refusals(report: Any) -> list[str]:
    return [r.reason for s in report.rules for r in s.refusals]


def with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy whose symbolic batch dim is `batch`, so the test helpers can make feeds."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        dim = value.type.tensor_type.shape.dim[0]
        if dim.dim_param:
            dim.dim_value = batch
    return fixed


@pytest.mark.parametrize("conv_first", [True, False], ids=["add-conv-z", "add-z-conv"])
@pytest.mark.parametrize("bias", [True, False])
def test_fuse_conv_add_relu_matches_original(conv_first: bool, bias: bool) -> None:
    model = conv_add_relu(conv_first=conv_first, bias=bias)
    fused, report = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=1)
    assert report.applied("FuseConvAddRelu" if conv_first else "FuseAddConvRelu") == 1
    [node] = [n for n in fused.graph.node if n.op_type == "FusedConv"]
    assert list(node.input) == ["x", "w", "b" if bias else "", "z"]
    assert op_types(fused) == ["Neg", "com.microsoft.FusedConv"]
    assert helper.get_attribute_value(node.attribute[0]) == b"Relu"
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("conv_first", [True, False])
def test_fuse_conv_add_relu_with_a_shortcut_conv_matches_original(conv_first: bool) -> None:
    # Both Add operands are Conv outputs (a ResNet downsampling block); one of them is fused.
    model = conv_add_relu(residual="conv", strides=2, size=7, conv_first=conv_first)
    fused, _ = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=1)
    assert sorted(op_types(fused)) == ["Conv", "com.microsoft.FusedConv"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_fuse_conv_add_relu_when_the_residual_is_the_conv_input() -> None:
    # Y = Relu(Conv(x) + x): Z and X are one tensor; FusedConv may write its output over Z's
    # buffer, which ORT's planner must not do while X is read. x is made an intermediate here
    # (graph inputs are never reused) to exercise that.
    rng = np.random.default_rng(5)
    c = 8
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x0", "w0"], ["x"]),
         helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["x", "c"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "identity_residual", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [2, c, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 6, 6])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    fused, _ = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=1)
    assert op_types(fused) == ["Conv", "com.microsoft.FusedConv"]
    assert list(fused.graph.node[1].input) == ["x", "w", "b", "x"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_fuse_conv_add_relu_keeps_the_residual_for_a_later_reader() -> None:
    # FusedConv may write Y over Z's buffer (MayInplace(3, 0)); a node reading Z afterwards must
    # still see Z.
    model = conv_add_relu(residual_read_later=True)
    fused, _ = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=1)
    assert op_types(fused) == ["Neg", "com.microsoft.FusedConv", "Sigmoid"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_fuse_conv_add_relu_refuses_float16() -> None:
    # ORT registers FusedConv for float32 only on the CPU; float16 would run only through Casts.
    model = conv_add_relu(dtype=np.float16)
    fused, report = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=0)
    assert op_types(fused) == UNFUSED
    assert any("FLOAT16" in r and "float32 only" in r for r in refusals(report)), report


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"residual_shape": [2, 8, 1, 1]}, "the Add broadcasts"),
        ({"residual_shape": [1, 8, 6, 6]}, "the Add broadcasts"),
        ({"residual_shape": [8, 6, 6]}, "the Add broadcasts"),
        ({"infer_shapes": False}, "no inferred shape (run shape inference)"),
        ({"symbolic_batch": True}, "symbolic or unknown dims"),
        ({"residual": "self"}, "adds 'c' to itself"),
        ({"residual": "graph_input"}, "graph input or initializer 'z'"),
        ({"residual": "initializer"}, "graph input or initializer 'z'"),
        ({"residual": "identity_of_input"}, "graph input or initializer 'z_in'"),
        ({"conv_out_is_graph_output": True}, None),
        ({"sum_is_graph_output": True}, None),
        ({"sum_has_other_consumer": True}, None),
    ],
    ids=["broadcast-spatial", "broadcast-batch", "broadcast-rank", "no-shapes", "symbolic-batch",
         "conv-plus-itself", "residual-is-graph-input", "residual-is-initializer",
         "residual-is-identity-of-input", "conv-out-is-output", "sum-is-output", "sum-shared"],
)
def test_fuse_conv_add_relu_refuses_unsafe_variants(variant: dict, reason: str | None) -> None:
    model = conv_add_relu(**variant)
    fused, report = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=0)
    assert "Add" in op_types(fused) and "Relu" in op_types(fused)
    # An intermediate used outside the pattern is refused by the rewriter's matcher before our
    # check runs, so only the check's own refusals carry a reason in the report.
    if reason is not None:
        assert any(reason in r for r in refusals(report)), report
    feeds_model = with_batch(model, 2) if variant.get("symbolic_batch") else model
    assert_outputs_close(feeds_model, with_batch(fused, 2) if variant.get("symbolic_batch")
                         else fused, atol=0, rtol=0)


def test_fuse_conv_add_relu_is_skipped_for_tensorrt() -> None:
    fused, report = apply_pass(conv_add_relu(), FUSE_CONV_ADD_RELU, backend="tensorrt")
    assert op_types(fused) == UNFUSED
    assert "fuse_conv_add_relu" in report.passes_skipped


@settings(max_examples=25, deadline=None)
@given(
    channels=st.sampled_from([1, 3, 8]),
    in_channels=st.sampled_from([1, 4]),
    batch=st.integers(1, 3),
    size=st.integers(3, 8),
    strides=st.sampled_from([1, 2]),
    bias=st.booleans(),
    conv_first=st.booleans(),
    residual=st.sampled_from(["computed", "conv"]),
    seed=st.integers(0, 2**16),
)
def test_fuse_conv_add_relu_is_equivalent_on_random_convs(
    channels: int, in_channels: int, batch: int, size: int, strides: int, bias: bool,
    conv_first: bool, residual: str, seed: int,
) -> None:
    model = conv_add_relu(channels=channels, in_channels=in_channels, batch=batch, size=size,
                          strides=strides, bias=bias, conv_first=conv_first, residual=residual,
                          seed=seed)
    fused, _ = apply_pass(model, FUSE_CONV_ADD_RELU, expect_count=1)
    assert "com.microsoft.FusedConv" in op_types(fused) and "Add" not in op_types(fused)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)
