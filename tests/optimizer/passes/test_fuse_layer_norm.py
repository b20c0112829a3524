"""fuse_layer_norm: LayerNorm written out in primitive ops becomes one LayerNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM, FuseLayerNorm
from optimizer.testing.norm_models import layer_norm
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types


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
