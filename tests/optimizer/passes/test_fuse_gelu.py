"""fuse_gelu: GELU written out (erf or tanh form) becomes one op; a bias Add folds in on ORT."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from optimizer.passes.base import FusionPass
from optimizer.passes.fuse_gelu import FUSE_GELU
from optimizer.testing.gelu_models import PRODUCTS, gelu
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-3)])
@pytest.mark.parametrize(("form", "op"), [("erf", "com.microsoft.Gelu"),
                                          ("tanh", "com.microsoft.FastGelu")])
def test_fuse_gelu_matches_torch_export_on_onnxruntime(
    dtype: type, atol: float, form: str, op: str
) -> None:
    model = gelu(form=form, dtype=dtype)
    fused, _ = apply_pass(model, FUSE_GELU, expect_count=1)
    assert op_types(fused) == [op]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-3)])
@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_fuse_gelu_lowers_to_gelu_20_on_tensorrt(dtype: type, atol: float, form: str) -> None:
    model = gelu(form=form, dtype=dtype, opset=20)
    fused, _ = apply_pass(model, FUSE_GELU, backend="tensorrt", expect_count=1)
    assert op_types(fused) == ["Gelu"]
    [node] = fused.graph.node
    approximate = helper.get_attribute_value(node.attribute[0]).decode()
    assert approximate == ("tanh" if form == "tanh" else "none")
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("scaling", ["div", "mul", "mul_swapped"])
@pytest.mark.parametrize("one_first", [False, True])
def test_fuse_gelu_matches_every_erf_spelling(product: str, scaling: str, one_first: bool) -> None:
    model = gelu(product=product, scaling=scaling, one_first=one_first)
    fused, _ = apply_pass(model, FUSE_GELU, expect_count=1)
    assert op_types(fused) == ["com.microsoft.Gelu"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("cube", ["pow", "mul_left", "mul_right"])
def test_fuse_gelu_matches_every_tanh_spelling(product: str, cube: str) -> None:
    model = gelu(form="tanh", product=product, cube=cube)
    fused, _ = apply_pass(model, FUSE_GELU, expect_count=1)
    assert op_types(fused) == ["com.microsoft.FastGelu"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-3)])
@pytest.mark.parametrize(
    ("form", "bias", "op", "rule"),
    [("erf", "add", "com.microsoft.BiasGelu", "FuseBiasGelu"),
     ("tanh", "add", "com.microsoft.FastGelu", "FuseBiasFastGelu"),
     ("erf", "gelu20", "com.microsoft.BiasGelu", "FuseBiasOnnxGelu"),
     ("tanh", "gelu20", "com.microsoft.FastGelu", "FuseBiasOnnxGelu")],
)
def test_fuse_gelu_folds_the_bias_on_onnxruntime(
    dtype: type, atol: float, form: str, bias: str, op: str, rule: str
) -> None:
    model = gelu(form=form, bias=bias, dtype=dtype, opset=20)
    fused, report = apply_pass(model, FUSE_GELU)
    assert report.applied(rule) == 1
    assert op_types(fused) == [op]
    assert list(fused.graph.node[0].input) == ["input", "bias"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_fuse_gelu_leaves_a_lone_gelu_20_alone(form: str) -> None:
    # What torch's dynamo exporter writes for nn.GELU() at its default opset 20; on ONNX
    # Runtime com.microsoft.Gelu is no faster (bench/fuse_norm_gelu.py).
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh" if form == "tanh" else "none")],
        "gelu20", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    for backend in ("onnxruntime", "tensorrt"):
        fused, _ = apply_pass(model, FUSE_GELU, backend=backend, expect_count=0)
        assert op_types(fused) == ["Gelu"]


def test_fuse_gelu_leaves_the_bias_add_on_tensorrt() -> None:
    model = gelu(bias="add", opset=20)
    fused, _ = apply_pass(model, FUSE_GELU, backend="tensorrt", expect_count=1)
    assert op_types(fused) == ["Add", "Gelu"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fuse_gelu_accepts_float16_rounded_constants() -> None:
    # float16 holds 0.044715 as 0.04470825 (1.5e-4 off): compared after the same rounding.
    model = gelu(form="tanh", dtype=np.float16)
    fused, _ = apply_pass(model, FUSE_GELU, expect_count=1)
    assert op_types(fused) == ["com.microsoft.FastGelu"]


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"half": 0.6}, "the factor 0.5 'half' is 0.6"),
        ({"root_two": 1.5}, "the divisor √2 'root_two' is 1.5"),
        ({"scaling": "mul", "root_two": 1.0}, "the factor 1/√2 'inv_root_two' is 1"),
        ({"one": 2.0}, "the 1 added to Erf 'one' is 2"),
        ({"half_as_input": True}, "'half' is also a graph input"),
        ({"erf_used_elsewhere": True}, "'curve' (Erf output) is a graph output"),
        ({"scaled_is_output": True}, "'scaled' (Div output) is a graph output"),
        ({"half": 0.50006}, "expected 0.5 (within 0.0001)"),
    ],
    ids=["half-0.6", "divisor", "factor", "one", "half-input", "erf-shared", "scaled-output",
         "just-outside-tolerance"],
)
def test_fuse_gelu_refuses_unsafe_erf_variants(variant: dict, reason: str) -> None:
    model = gelu(**variant)
    fused, report = apply_pass(model, FUSE_GELU, expect_count=0)
    assert "Erf" in op_types(fused)
    [stats] = [s for s in report.rules if s.rule == "FuseGeluErf"]
    assert any(reason in r.reason for r in stats.refusals), stats


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"cubic": 0.05}, "the cubic coefficient 'cubic' is 0.05"),
        ({"sqrt_2_over_pi": 0.8}, "the factor √(2/π) 'k' is 0.8"),
        ({"half": 0.6, "cube": "mul_left"}, "the factor 0.5 'half' is 0.6"),
    ],
    ids=["cubic", "sqrt-2-over-pi", "half"],
)
def test_fuse_gelu_refuses_unsafe_tanh_variants(variant: dict, reason: str) -> None:
    model = gelu(form="tanh", **variant)
    fused, report = apply_pass(model, FUSE_GELU, expect_count=0)
    assert "Tanh" in op_types(fused)
    [stats] = [s for s in report.rules if s.rule == "FuseGeluTanh"]
    assert any(reason in r.reason for r in stats.refusals), stats


def test_fuse_gelu_refuses_tensorrt_lowering_below_opset_20() -> None:
    model = gelu(opset=18)
    fused, report = apply_pass(model, FUSE_GELU, backend="tensorrt", expect_count=0)
    assert "Erf" in op_types(fused)
    [stats] = [s for s in report.rules if s.rule == "FuseGeluErf"]
    assert any("opset 18" in r.reason and "needs 20" in r.reason for r in stats.refusals)


def test_bias_add_read_elsewhere_stays_before_the_fused_gelu() -> None:
    model = gelu(bias="add", bias_used_elsewhere=True)
    one_rule = FusionPass(name="bias", summary="", stage="other", rules={
        "onnxruntime": [r for r in FUSE_GELU.rules["onnxruntime"] if r.name in
                        ("FuseGeluErf", "FuseBiasGelu")]})
    fused, report = apply_pass(model, one_rule)
    assert report.applied("FuseBiasGelu") == 0
    [stats] = [s for s in report.rules if s.rule == "FuseBiasGelu"]
    assert any("'x' (Add output) is also used by Relu" in r.reason for r in stats.refusals)
    assert op_types(fused) == ["Add", "Relu", "com.microsoft.Gelu"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@settings(max_examples=30, deadline=None)
@given(
    form=st.sampled_from(["erf", "tanh"]),
    product=st.sampled_from(PRODUCTS),
    scaling=st.sampled_from(["div", "mul", "mul_swapped"]),
    cube=st.sampled_from(["pow", "mul_left", "mul_right"]),
    one_first=st.booleans(),
    bias=st.sampled_from([None, "add"]),
    hidden=st.integers(1, 64),
    rows=st.integers(1, 5),
    backend=st.sampled_from(["onnxruntime", "tensorrt"]),
    seed=st.integers(0, 2**16),
)
def test_fuse_gelu_is_equivalent_on_random_spellings(
    form: str, product: str, scaling: str, cube: str, one_first: bool, bias: str | None,
    hidden: int, rows: int, backend: str, seed: int,
) -> None:
    model = gelu(form=form, product=product, scaling=scaling, cube=cube, one_first=one_first,
                 bias=bias, shape=(rows, hidden), opset=20, seed=seed)
    fused, report = apply_pass(model, FUSE_GELU, backend=backend)
    assert report.applied("FuseGeluErf" if form == "erf" else "FuseGeluTanh") == 1
    assert len(fused.graph.node) == (1 if bias is None or backend == "onnxruntime" else 2)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)
