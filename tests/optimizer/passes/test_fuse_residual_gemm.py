"""fuse_residual_gemm: a linear layer's bias and residual Add fold into one Gemm's C input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_residual_gemm import FUSE_RESIDUAL_GEMM
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def linear_residual(
    *, lead: tuple[int, ...] = (2, 8), k: int = 16, n: int = 12, dtype: type = np.float32,
    bias_first: bool = False, residual_first: bool = False, seed: int = 0,
    weight_is_input: bool = False, residual_shape: tuple[int, ...] | None = None,
    biased_is_output: bool = False,
) -> onnx.ModelProto:
    """y = (x @ W + b) + r, LayerNorm-free; random W, b; r a graph input."""
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    out_shape = [*lead, n]
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.2).astype(dtype), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(dtype), "b")
    inputs = [helper.make_tensor_value_info("x", elem, [*lead, k]),
              helper.make_tensor_value_info("r", elem, list(residual_shape or out_shape))]
    inits = [b] if weight_is_input else [w, b]
    if weight_is_input:
        inputs.append(helper.make_tensor_value_info("w", elem, [k, n]))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["b", "mm"] if bias_first else ["mm", "b"], ["biased"]),
        helper.make_node("Add", ["r", "biased"] if residual_first else ["biased", "r"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", elem, out_shape)]
    if biased_is_output:
        outputs.append(helper.make_tensor_value_info("biased", elem, out_shape))
    graph = helper.make_graph(nodes, "linear_residual", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 1e-2)])
@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("residual_first", [False, True])
def test_fuse_residual_gemm_matches_original(
    dtype: type, atol: float, bias_first: bool, residual_first: bool
) -> None:
    model = linear_residual(dtype=dtype, bias_first=bias_first, residual_first=residual_first)
    fused, _ = apply_pass(model, FUSE_RESIDUAL_GEMM, expect_count=1)
    assert sorted(op_types(fused)) == ["Add", "Gemm", "Reshape", "Reshape", "Reshape"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


def test_fuse_residual_gemm_on_2d_input_needs_no_reshape() -> None:
    model = linear_residual(lead=(6,))
    fused, _ = apply_pass(model, FUSE_RESIDUAL_GEMM, expect_count=1)
    assert op_types(fused) == ["Add", "Gemm"]
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ({"weight_is_input": True}, "not a constant"),
        ({"residual_shape": (1, 8, 12)}, "exact shape"),
        ({"biased_is_output": True}, None),  # refused by the matcher before our check
    ],
    ids=["weight-not-constant", "residual-broadcasts", "intermediate-is-output"],
)
def test_fuse_residual_gemm_refuses_unsafe_variants(variant: dict, reason: str | None) -> None:
    fused, report = apply_pass(linear_residual(**variant), FUSE_RESIDUAL_GEMM, expect_count=0)
    assert "Gemm" not in op_types(fused)
    if reason is not None:
        refusals = [r.reason for s in report.rules for r in s.refusals]
        assert any(reason in r for r in refusals), refusals


@settings(max_examples=20, deadline=None)
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    k=st.integers(1, 24),
    n=st.integers(1, 24),
    seed=st.integers(0, 2**16),
)
def test_fuse_residual_gemm_is_equivalent_on_random_layers(
    lead: tuple[int, ...], k: int, n: int, seed: int
) -> None:
    model = linear_residual(lead=lead, k=k, n=n, seed=seed)
    fused, _ = apply_pass(model, FUSE_RESIDUAL_GEMM, expect_count=1)
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4, seed=seed)
