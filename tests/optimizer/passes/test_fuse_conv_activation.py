"""fuse_conv_activation: Conv + activation → com.microsoft.FusedConv (SiLU → Conv + QuickGelu)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.engine import run_passes
from optimizer.passes.fold_batch_norm import FOLD_BATCH_NORM
from optimizer.passes.fuse_conv_activation import FUSE_CONV_ACTIVATION
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
FUSED = ["com.microsoft.FusedConv"]
SILU = ["Conv", "com.microsoft.QuickGelu"]

# name -> (expected ops after fusion, the rule that fires)
ACTIVATIONS = {
    "Relu": (FUSED, "FuseConvRelu"),
    "Relu6": (FUSED, "FuseConvClip"),
    "ClipInputs": (FUSED, "FuseConvClip"),
    "ClipMaxOnly": (FUSED, "FuseConvClip"),
    "ClipNoBounds": (FUSED, "FuseConvClip"),
    "ClipAttrs": (FUSED, "FuseConvClip"),  # opset 10: bounds are attributes
    "ClipConstantNodes": (FUSED, "FuseConvClip"),
    "LeakyRelu": (FUSED, "FuseConvLeakyRelu"),
    "LeakyReluDefault": (FUSED, "FuseConvLeakyRelu"),
    "Sigmoid": (FUSED, "FuseConvSigmoid"),
    "HardSigmoid": (FUSED, "FuseConvHardSigmoid"),
    "HardSigmoidDefault": (FUSED, "FuseConvHardSigmoid"),
    "Tanh": (FUSED, "FuseConvTanh"),
    "Silu": (SILU, "FuseConvSilu"),
    "SiluSwapped": (SILU, "FuseConvSiluSwapped"),
}


def _scalar(value: float, dtype: type, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _activation(kind: str, dtype: type, rng: np.random.Generator,
                bounds_as_inputs: bool) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes from the conv output "c" to "y", and the initializers they need."""
    lo, hi = float(rng.uniform(-2.0, -0.2)), float(rng.uniform(0.2, 2.0))
    if kind == "Relu6":
        return [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], [
            _scalar(0.0, dtype, "lo"), _scalar(6.0, dtype, "hi")]
    if kind == "ClipInputs":
        inits = [] if bounds_as_inputs else [_scalar(lo, dtype, "lo"), _scalar(hi, dtype, "hi")]
        return [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], inits
    if kind == "ClipMaxOnly":
        return [helper.make_node("Clip", ["c", "", "hi"], ["y"])], [_scalar(hi, dtype, "hi")]
    if kind == "ClipNoBounds":
        return [helper.make_node("Clip", ["c"], ["y"])], []
    if kind == "ClipAttrs":
        return [helper.make_node("Clip", ["c"], ["y"], min=lo, max=hi)], []
    if kind == "ClipConstantNodes":
        return [helper.make_node("Constant", [], ["lo"], value=_scalar(lo, dtype, "lo")),
                helper.make_node("Constant", [], ["hi"], value=_scalar(hi, dtype, "hi")),
                helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], []
    if kind == "LeakyRelu":
        return [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=float(rng.uniform(0.05, 0.5)))], []
    if kind == "HardSigmoid":
        return [helper.make_node("HardSigmoid", ["c"], ["y"], alpha=float(rng.uniform(0.1, 0.4)),
                                 beta=float(rng.uniform(0.3, 0.7)))], []
    if kind in ("LeakyReluDefault", "HardSigmoidDefault"):
        return [helper.make_node(kind.removesuffix("Default"), ["c"], ["y"])], []
    if kind == "Silu":
        return [helper.make_node("Sigmoid", ["c"], ["s"]),
                helper.make_node("Mul", ["c", "s"], ["y"])], []
    if kind == "SiluSwapped":
        return [helper.make_node("Sigmoid", ["c"], ["s"]),
                helper.make_node("Mul", ["s", "c"], ["y"])], []
    return [helper.make_node(kind, ["c"], ["y"])], []


def conv_act(
    kind: str = "Relu", *, channels: int = 8, in_channels: int = 4, dtype: type = np.float32,
    rank: int = 2, size: int = 6, bias: bool = True, group: int = 1, strides: int = 1,
    dilations: int = 1, seed: int = 0, bounds_as_inputs: bool = False,
    bounds_overridable: bool = False,
    conv_out_is_graph_output: bool = False, conv_out_has_other_consumer: bool = False,
    gate_is_graph_output: bool = False,
) -> onnx.ModelProto:
    """x → Conv (random weights and bias) → activation → y, with shapes inferred."""
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    w_shape = (channels, in_channels // group) + (3,) * rank
    inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(dtype), "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(dtype), "b"))
        conv_inputs.append("b")
    tail, tail_inits = _activation(kind, dtype, rng, bounds_as_inputs)
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], pads=[1] * (2 * rank), group=group,
                              strides=[strides] * rank, dilations=[dilations] * rank), *tail]
    inputs = [helper.make_tensor_value_info("x", elem, [1, in_channels] + [size] * rank)]
    if bounds_as_inputs or bounds_overridable:  # overridable: also initializers (defaults)
        inputs += [helper.make_tensor_value_info(n, elem, []) for n in ("lo", "hi")]
    outputs = [helper.make_tensor_value_info("y", elem, None)]
    if conv_out_is_graph_output:
        outputs.append(helper.make_tensor_value_info("c", elem, None))
    if conv_out_has_other_consumer:
        nodes.append(helper.make_node("Neg", ["c"], ["other"], name="other_user"))
        outputs.append(helper.make_tensor_value_info("other", elem, None))
    if gate_is_graph_output:
        outputs.append(helper.make_tensor_value_info("s", elem, None))
    graph = helper.make_graph(nodes, "conv_act", inputs, outputs, initializer=inits + tail_inits)
    opset = 10 if kind == "ClipAttrs" else 17
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def refusals(report: Any, rule: str) -> list[str]:
    [stats] = [s for s in report.rules if s.rule == rule]
    return [r.reason for r in stats.refusals]


@pytest.mark.parametrize("kind", list(ACTIVATIONS))
def test_fuse_conv_activation_matches_original(kind: str) -> None:
    model = conv_act(kind)
    fused, report = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=1)
    expected_ops, rule = ACTIVATIONS[kind]
    assert report.applied(rule) == 1
    assert op_types(fused) == expected_ops
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_fused_conv_carries_the_activation_and_its_parameters() -> None:
    fused, _ = apply_pass(conv_act("HardSigmoidDefault"), FUSE_CONV_ACTIVATION, expect_count=1)
    [node] = fused.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["activation"] == b"HardSigmoid"
    assert attrs["activation_params"] == pytest.approx([0.2, 0.5])  # the ONNX defaults
    assert {"com.microsoft": 1}.items() <= {o.domain: o.version for o in fused.opset_import}.items()


@pytest.mark.parametrize("rank", [1, 3, 4])
@pytest.mark.parametrize("kind", ["Relu", "HardSigmoid", "Silu"])
def test_fuse_conv_activation_matches_original_in_other_ranks(rank: int, kind: str) -> None:
    model = conv_act(kind, rank=rank, size=5 if rank < 4 else 3)
    fused, _ = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=1)
    assert op_types(fused) == ACTIVATIONS[kind][0]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("group", "strides", "dilations", "bias"),
                         [(2, 1, 1, True), (4, 2, 1, False), (1, 1, 2, True), (1, 2, 2, False)])
def test_fuse_conv_activation_keeps_conv_attributes(group: int, strides: int, dilations: int,
                                                    bias: bool) -> None:
    model = conv_act("Relu6", in_channels=8, size=9, group=group, strides=strides,
                     dilations=dilations, bias=bias)
    fused, _ = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=1)
    assert op_types(fused) == FUSED
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["Relu", "Relu6", "LeakyRelu", "Sigmoid", "Silu"])
def test_fuse_conv_activation_refuses_float16(kind: str) -> None:
    # ORT registers FusedConv and QuickGelu for float32 only on the CPU; a float16 node would run
    # only through Casts that ORT inserts, so the rule leaves float16 graphs alone.
    model = conv_act(kind, dtype=np.float16)
    fused, report = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=0)
    assert op_types(fused) == op_types(model)
    assert any("FLOAT16" in r and "float32 only" in r
               for r in refusals(report, ACTIVATIONS[kind][1])), report


def test_fuse_conv_activation_leaves_float16_running_as_before() -> None:
    model = conv_act("Relu", dtype=np.float16)
    fused, _ = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=0)
    assert_outputs_close(model, fused, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("kind", "variant", "rule", "reason"),
    [
        ("ClipInputs", {"bounds_as_inputs": True}, "FuseConvClip", "'lo' is not a constant"),
        ("ClipInputs", {"bounds_overridable": True}, "FuseConvClip", "'lo' is also a graph input"),
        ("Relu", {"conv_out_is_graph_output": True}, "FuseConvRelu", None),
        ("Relu", {"conv_out_has_other_consumer": True}, "FuseConvRelu", None),
        ("Sigmoid", {"conv_out_has_other_consumer": True}, "FuseConvSigmoid", None),
        ("Silu", {"conv_out_has_other_consumer": True}, "FuseConvSilu", None),
        ("Silu", {"conv_out_is_graph_output": True}, "FuseConvSilu", None),
        ("Silu", {"gate_is_graph_output": True}, "FuseConvSilu", None),
    ],
    ids=["clip-bounds-are-graph-inputs", "clip-bounds-overridable", "conv-out-is-output", "conv-out-shared",
         "sigmoid-conv-out-shared", "silu-conv-out-shared", "silu-conv-out-is-output",
         "silu-gate-is-output"],
)
def test_fuse_conv_activation_refuses_unsafe_variants(kind: str, variant: dict, rule: str,
                                                      reason: str | None) -> None:
    model = conv_act(kind, **variant)
    fused, report = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=0)
    assert op_types(fused) == op_types(model)
    # An intermediate used outside the pattern is refused by the rewriter's matcher before our
    # check runs, so only the check's own refusals carry a reason in the report.
    if reason is not None:
        assert any(reason in r for r in refusals(report, rule)), report


def test_fuse_conv_clip_refuses_reversed_bounds() -> None:
    model = conv_act("Relu6")
    for init in model.graph.initializer:
        if init.name in ("lo", "hi"):
            init.CopyFrom(_scalar(6.0 if init.name == "lo" else 0.0, np.float32, init.name))
    _, report = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=0)
    assert any("min=6.0, max=0.0" in r for r in refusals(report, "FuseConvClip")), report


def test_fuse_conv_clip_refuses_non_scalar_bounds() -> None:
    model = conv_act("Relu6")
    for init in model.graph.initializer:
        if init.name == "hi":
            init.CopyFrom(numpy_helper.from_array(np.full((2,), 6.0, np.float32), "hi"))
    _, report = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=0)
    assert any("shape (2,)" in r for r in refusals(report, "FuseConvClip")), report


def test_conv_bn_relu_becomes_one_fused_conv() -> None:
    """fold_batch_norm runs first (same "conv_bn_act" stage), then the Relu fuses in."""
    rng = np.random.default_rng(3)
    c = 8
    params = {"gamma": rng.uniform(0.5, 1.5, c), "beta": rng.standard_normal(c),
              "mean": rng.standard_normal(c), "var": rng.uniform(0.5, 2.0, c),
              "b": rng.standard_normal(c)}
    inits = [numpy_helper.from_array(rng.standard_normal((c, 4, 3, 3)).astype(np.float32), "w")]
    inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"]),
         helper.make_node("Relu", ["n"], ["y"])],
        "conv_bn_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 6, 6])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    ir_model = ir.from_proto(model)
    report = run_passes(ir_model, [FOLD_BATCH_NORM, FUSE_CONV_ACTIVATION], backend="onnxruntime")
    fused = ir.to_proto(ir_model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.applied("fold_batch_norm") == 1 and report.applied("fuse_conv_activation") == 1
    assert op_types(fused) == FUSED
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-4)


def test_fuse_conv_activation_is_skipped_for_tensorrt() -> None:
    model = conv_act("Relu")
    fused, report = apply_pass(model, FUSE_CONV_ACTIVATION, backend="tensorrt")
    assert op_types(fused) == ["Conv", "Relu"]
    assert "fuse_conv_activation" in report.passes_skipped


def test_fused_model_runs_where_relu_output_feeds_more_layers() -> None:
    """A fused conv in the middle of a graph: its output keeps its consumers."""
    model = conv_act("Relu")
    model.graph.node.append(helper.make_node("Sigmoid", ["y"], ["z"]))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 6, 6]))
    fused, _ = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=1)
    assert op_types(fused) == [*FUSED, "Sigmoid"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(sorted(ACTIVATIONS)),
    channels=st.sampled_from([1, 3, 8]),
    in_channels=st.sampled_from([1, 4]),
    rank=st.integers(1, 3),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
    size=st.integers(3, 7),
)
def test_fuse_conv_activation_is_equivalent_on_random_convs(
    kind: str, channels: int, in_channels: int, rank: int, bias: bool, seed: int, size: int
) -> None:
    model = conv_act(kind, channels=channels, in_channels=in_channels, rank=rank, bias=bias,
                     seed=seed, size=size)
    fused, _ = apply_pass(model, FUSE_CONV_ACTIVATION, expect_count=1)
    assert op_types(fused) == ACTIVATIONS[kind][0]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)
