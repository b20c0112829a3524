"""fuse_layer_norm: LayerNorm written out in primitive ops becomes one LayerNormalization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM, FuseLayerNorm
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def layer_norm(
    *, shape: tuple[int, ...] = (2, 5, 16), axes: tuple[int, ...] = (-1,),
    variance_axes: tuple[int, ...] | None = None, dtype: type = np.float32,
    epsilon: float | None = 1e-5, opset: int = 18, square: str = "pow", divide: str = "div",
    scale: bool = True, bias: bool = True, scale_first: bool = False, bias_first: bool = False,
    param_shape: tuple[int, ...] | None = None, exponent: float = 2.0, seed: int = 0,
    gamma_as_input: bool = False, epsilon_as_input: bool = False,
    deviation_used_elsewhere: bool = False, mean_is_output: bool = False,
    pre_op: bool = False, infer_shapes: bool = True,
) -> onnx.ModelProto:
    """x → ReduceMean → Sub → Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div → Mul → Add → y.

    gamma and beta are random with `param_shape` (default: the normalized dims). `pre_op` puts
    a Relu before the LayerNorm, so x is an intermediate whose shape only inference knows.
    `epsilon` None leaves out the Add, as torch's dynamo exporter does with eps=1e-12.
    """
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    rank = len(shape)
    k_dims = tuple(shape[a % rank] for a in sorted(a % rank for a in axes))
    param_shape = k_dims if param_shape is None else param_shape
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    graph_inputs = [helper.make_tensor_value_info("input", elem, list(shape))]
    # Left for inference to fill in: a gamma of higher rank makes y larger than x.
    outputs = [helper.make_tensor_value_info("y", elem, None if infer_shapes else list(shape))]
    x = "input"
    if pre_op:
        nodes.append(helper.make_node("Relu", ["input"], ["x"]))
        x = "x"

    def reduce_mean(src: str, dst: str, reduce_axes: tuple[int, ...]) -> None:
        if opset >= 18:
            name = f"{dst}_axes"
            inits.append(numpy_helper.from_array(np.array(reduce_axes, np.int64), name))
            nodes.append(helper.make_node("ReduceMean", [src, name], [dst], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [src], [dst], axes=list(reduce_axes),
                                          keepdims=1))

    reduce_mean(x, "mean", axes)
    nodes.append(helper.make_node("Sub", [x, "mean"], ["d"]))
    if square == "pow":
        inits.append(numpy_helper.from_array(np.array(exponent, dtype), "two"))
        nodes.append(helper.make_node("Pow", ["d", "two"], ["d2"]))
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["d2"]))
    reduce_mean("d2", "var", axes if variance_axes is None else variance_axes)
    if epsilon_as_input:
        graph_inputs.append(helper.make_tensor_value_info("eps", elem, []))
    if epsilon is None:
        nodes.append(helper.make_node("Sqrt", ["var"], ["std"]))
    else:
        inits.append(numpy_helper.from_array(np.array(epsilon, dtype), "eps"))
        nodes += [helper.make_node("Add", ["var", "eps"], ["var_eps"]),
                  helper.make_node("Sqrt", ["var_eps"], ["std"])]
    if divide == "div":
        nodes.append(helper.make_node("Div", ["d", "std"], ["normalized"]))
    else:
        nodes.append(helper.make_node("Reciprocal", ["std"], ["inv_std"]))
        operands = ["d", "inv_std"] if divide == "mul_reciprocal" else ["inv_std", "d"]
        nodes.append(helper.make_node("Mul", operands, ["normalized"]))
    last = "normalized"
    if scale:
        gamma = rng.uniform(0.5, 1.5, param_shape) * rng.choice([-1, 1], param_shape)
        inits.append(numpy_helper.from_array(gamma.astype(dtype), "gamma"))
        if gamma_as_input:
            graph_inputs.append(helper.make_tensor_value_info("gamma", elem, list(param_shape)))
        operands = ["gamma", last] if scale_first else [last, "gamma"]
        nodes.append(helper.make_node("Mul", operands, ["scaled"]))
        last = "scaled"
    if bias:
        beta = rng.standard_normal(param_shape)
        inits.append(numpy_helper.from_array(beta.astype(dtype), "beta"))
        operands = ["beta", last] if bias_first else [last, "beta"]
        nodes.append(helper.make_node("Add", operands, ["biased"]))
        last = "biased"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    if deviation_used_elsewhere:
        nodes.append(helper.make_node("Abs", ["d"], ["abs_d"]))
        outputs.append(helper.make_tensor_value_info("abs_d", elem, list(shape)))
    if mean_is_output:
        outputs.append(helper.make_tensor_value_info("mean", elem, None))
    graph = helper.make_graph(nodes, "layer_norm", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    # The job's load stage infers shapes before the passes run; do the same.
    return onnx.shape_inference.infer_shapes(model) if infer_shapes else model


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
@pytest.mark.parametrize("opset", [17, 18])
def test_fuse_layer_norm_matches_original(dtype: type, atol: float, opset: int) -> None:
    model = layer_norm(dtype=dtype, opset=opset)
    fused, report = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert report.applied("FuseLayerNorm") == 1
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
def test_fuse_layer_norm_lowers_to_the_same_op_on_tensorrt(dtype: type, atol: float) -> None:
    model = layer_norm(dtype=dtype)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, backend="tensorrt", expect_count=1)
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("divide", ["div", "mul_reciprocal", "reciprocal_mul"])
@pytest.mark.parametrize(("scale_first", "bias_first"), [(False, False), (True, True)])
def test_fuse_layer_norm_matches_every_written_form(
    square: str, divide: str, scale_first: bool, bias_first: bool
) -> None:
    model = layer_norm(square=square, divide=divide, scale_first=scale_first,
                       bias_first=bias_first)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("scale", "bias", "rule"),
    [(True, False, "FuseLayerNormScaleOnly"), (False, True, "FuseLayerNormBiasOnly"),
     (False, False, "FuseLayerNormUnscaled")],
)
def test_fuse_layer_norm_without_gamma_or_beta(scale: bool, bias: bool, rule: str) -> None:
    model = layer_norm(scale=scale, bias=bias)
    fused, report = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert report.applied(rule) == 1
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("shape", "axes", "param_shape"),
    [((2, 5, 16), (2,), None),                # positive trailing axis
     ((2, 5, 16), (-2, -1), None),            # two normalized axes
     ((2, 5, 16), (1, 2), (16,)),             # gamma broadcast along the first normalized axis
     ((2, 5, 16), (-1,), (1, 1, 16)),         # leading ones in gamma
     ((3, 2, 4, 8), (-3, -2, -1), (4, 1)),    # broadcast inside the normalized dims
     ((6, 16), (-1,), None)],                 # rank 2
    ids=["axis-2", "axes-last-two", "broadcast-gamma", "leading-ones", "rank-4", "rank-2"],
)
def test_fuse_layer_norm_handles_axes_and_broadcast_parameters(
    shape: tuple[int, ...], axes: tuple[int, ...], param_shape: tuple[int, ...] | None
) -> None:
    model = layer_norm(shape=shape, axes=axes, param_shape=param_shape)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    [node] = [n for n in fused.graph.node if n.op_type == "LayerNormalization"]
    assert helper.get_attribute_value(node.attribute[0]) == -len(axes)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("square", ["pow", "mul"])
def test_fuse_layer_norm_matches_torch_export_of_a_hand_written_layer_norm(square: str) -> None:
    # torch.onnx.export(dynamo=True, opset 18) of g * ((x - m) / sqrt(var + 1e-12)) + b writes
    # ReduceMean(axes input) → Sub → Pow/Mul → ReduceMean → Sqrt → Div → Mul(g, ·) → Add(·, b):
    # its optimizer drops the Add of 1e-12.
    model = layer_norm(square=square, epsilon=None, scale_first=True)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    [node] = [n for n in fused.graph.node if n.op_type == "LayerNormalization"]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["epsilon"] == 0.0
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_layer_norm_uses_the_models_epsilon() -> None:
    model = layer_norm(epsilon=0.5)  # the usual 1e-5 would be far off
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_layer_norm_on_an_intermediate_with_inferred_shape() -> None:
    model = layer_norm(pre_op=True)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert op_types(fused) == ["Relu", "LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"axes": (1,), "shape": (2, 16, 16)}, "are not the trailing axes"),
        ({"variance_axes": (-2, -1)}, "the variance reduces"),
        ({"epsilon_as_input": True}, "'eps' is also a graph input"),
        ({"deviation_used_elsewhere": True}, "'d' (Sub output) is also used by Abs"),
        ({"mean_is_output": True}, "'mean' (ReduceMean output) is a graph output"),
        ({"exponent": 3.0}, "not 2"),
        ({"opset": 16}, "opset 16"),
        ({"param_shape": (5, 16)}, "varies along axes that are not normalized"),
        ({"param_shape": (3, 1, 1, 16)}, "rank 4, above x's rank 3"),
        ({"pre_op": True, "infer_shapes": False}, "unknown (run shape inference)"),
    ],
    ids=["wrong-axes", "mismatched-axes", "epsilon-input", "deviation-shared", "mean-output",
         "cube", "old-opset", "gamma-per-row", "gamma-adds-an-axis", "unknown-shape"],
)
def test_fuse_layer_norm_refuses_unsafe_variants(variant: dict, reason: str) -> None:
    model = layer_norm(**variant)
    fused, report = apply_pass(model, FUSE_LAYER_NORM, expect_count=0)
    assert "LayerNormalization" not in op_types(fused)
    [stats] = [s for s in report.rules if s.rule == "FuseLayerNorm"]
    assert any(reason in r.reason for r in stats.refusals), stats


def test_non_constant_gamma_is_not_folded_but_left_as_a_mul_after_the_fused_core() -> None:
    model = layer_norm(gamma_as_input=True)
    full_rule_only = FusionPass(name="full", summary="", stage="other",
                                rules={"onnxruntime": [FuseLayerNorm.rule()]})
    _, report = apply_pass(model, full_rule_only, expect_count=0)
    [stats] = report.rules
    assert any("'gamma' is also a graph input" in r.reason for r in stats.refusals), stats

    fused, report = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert report.applied("FuseLayerNormUnscaled") == 1
    assert op_types(fused) == ["LayerNormalization", "Mul", "Add", "Identity"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    hidden=st.integers(1, 48),
    rows=st.integers(1, 6),
    two_axes=st.booleans(),
    epsilon=st.floats(1e-6, 1e-1),
    square=st.sampled_from(["pow", "mul"]),
    divide=st.sampled_from(["div", "mul_reciprocal", "reciprocal_mul"]),
    scale=st.booleans(),
    bias=st.booleans(),
    scale_first=st.booleans(),
    bias_first=st.booleans(),
    opset=st.sampled_from([17, 18, 20]),
    seed=st.integers(0, 2**16),
)
def test_fuse_layer_norm_is_equivalent_on_random_layer_norms(
    hidden: int, rows: int, two_axes: bool, epsilon: float, square: str, divide: str,
    scale: bool, bias: bool, scale_first: bool, bias_first: bool, opset: int, seed: int,
) -> None:
    model = layer_norm(shape=(2, rows, hidden), axes=(-2, -1) if two_axes else (-1,),
                       epsilon=epsilon, square=square, divide=divide, scale=scale, bias=bias,
                       scale_first=scale_first, bias_first=bias_first, opset=opset, seed=seed)
    fused, _ = apply_pass(model, FUSE_LAYER_NORM, expect_count=1)
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-3, seed=seed)
