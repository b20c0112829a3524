"""fuse_matmul_add: MatMul + bias → Gemm (reshaped for rank 3+), constant scales folded into W."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.fusion_report import FusionReport
from optimizer.passes.cleanup import CLEANUP
from optimizer.passes.engine import run_passes
from optimizer.passes.fuse_matmul_add import FUSE_MATMUL_ADD, RESHAPED_GEMM_MAX_K
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
              np.int32: TensorProto.INT32}
TOLERANCES = [(np.float32, 1e-4), (np.float16, 1e-2)]


def linear(
    *, x_shape: tuple[int | str, ...] = (4, 16), n: int = 8, dtype: type = np.float32,
    bias_shape: tuple[int, ...] | str | None = "n",
    bias_first: bool = False, out_scale: tuple[int, ...] | None = None, scale_first: bool = False,
    in_scale: tuple[int, ...] | None = None, seed: int = 0, as_inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (), share_weights: bool = False, computed: tuple[str, ...] = (),
) -> onnx.ModelProto:
    """x → [Mul(x, s_in)] → MatMul(·, W) → [Mul(·, s_out)] → [Add(·, bias)] → y.

    `as_inputs` names parameters that are graph inputs too; `outputs` names intermediates
    ("mm", "scaled_x", "scaled") that are also graph outputs; `share_weights` adds a second
    MatMul reading W; `computed` names parameters that a node computes (Identity of a constant).
    """
    rng = np.random.default_rng(seed)
    k = int(x_shape[-1])
    elem = NP_TO_ONNX[dtype]
    params: dict[str, np.ndarray] = {
        "w": rng.standard_normal((k, n)) / np.sqrt(k)}
    nodes = []
    x = "x"
    if in_scale is not None:
        params["s_in"] = rng.uniform(0.5, 2.0, in_scale)
        nodes.append(helper.make_node("Mul", ["s_in", x] if scale_first else [x, "s_in"],
                                      ["scaled_x"]))
        x = "scaled_x"
    nodes.append(helper.make_node("MatMul", [x, "w"], ["mm"]))
    value = "mm"
    if out_scale is not None:
        params["s_out"] = rng.uniform(0.5, 2.0, out_scale)
        nodes.append(helper.make_node("Mul", ["s_out", value] if scale_first else [value, "s_out"],
                                      ["scaled"]))
        value = "scaled"
    if bias_shape is not None:
        params["bias"] = rng.standard_normal((n,) if bias_shape == "n" else bias_shape)
        nodes.append(helper.make_node("Add", ["bias", value] if bias_first else [value, "bias"],
                                      ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [value], ["y"]))
    inits = [numpy_helper.from_array(v.astype(dtype), f"{name}_raw" if name in computed else name)
             for name, v in params.items()]
    nodes[:0] = [helper.make_node("Identity", [f"{name}_raw"], [name]) for name in computed]
    inputs = [helper.make_tensor_value_info("x", elem, list(x_shape))]
    inputs += [helper.make_tensor_value_info(name, elem, list(params[name].shape))
               for name in as_inputs]
    out_shape = [*x_shape[:-1], n]
    graph_outputs = [helper.make_tensor_value_info("y", elem, None)]
    graph_outputs += [helper.make_tensor_value_info(name, elem, None) for name in outputs]
    if share_weights:
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["other"], name="other_matmul"))
        graph_outputs.append(helper.make_tensor_value_info("other", elem, out_shape))
    graph = helper.make_graph(nodes, "linear", inputs, graph_outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def concrete(model: onnx.ModelProto, batch: int = 3) -> onnx.ModelProto:
    """The model with symbolic dims set to `batch`, so random inputs can be drawn for it."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_value = batch
    return copy


def refusals(report: FusionReport, rule: str) -> list[str]:
    [stats] = [s for s in report.rules if s.rule == rule]
    return [r.reason for r in stats.refusals]


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("bias_shape", ["n", (1, 8), (1,), (), (4, 8)])
def test_2d_matmul_add_becomes_gemm(dtype: type, atol: float, bias_first: bool,
                                    bias_shape: tuple[int, ...]) -> None:
    model = linear(dtype=dtype, bias_first=bias_first, bias_shape=bias_shape)
    fused, _ = apply_pass(model, FUSE_MATMUL_ADD, expect_count=1)
    assert op_types(fused) == ["Gemm"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("x_shape", [(2, 5, 32), (2, 3, 4, 64), ("batch", 5, 32)])
def test_rank3_matmul_add_becomes_reshaped_gemm(dtype: type, atol: float,
                                                x_shape: tuple[int | str, ...]) -> None:
    model = linear(x_shape=x_shape, n=24, dtype=dtype, bias_shape=(1, 1, 24))
    fused, _ = apply_pass(model, FUSE_MATMUL_ADD, expect_count=1)
    assert op_types(fused) == ["Reshape", "Gemm", "Reshape"]
    assert_outputs_close(concrete(model), concrete(fused), atol=atol, rtol=1e-3)


def test_rank3_with_large_k_stays_matmul_add_on_measurement() -> None:
    model = linear(x_shape=(2, 5, RESHAPED_GEMM_MAX_K + 8))
    fused, report = apply_pass(model, FUSE_MATMUL_ADD, expect_count=0)
    assert op_types(fused) == ["MatMul", "Add"]
    assert any("measured no faster" in r for r in refusals(report, "MatMulAddToReshapedGemm"))


def test_tensorrt_gets_no_reshaped_gemm() -> None:
    fused, _ = apply_pass(linear(x_shape=(2, 5, 32)), FUSE_MATMUL_ADD, backend="tensorrt",
                          expect_count=0)
    assert op_types(fused) == ["MatMul", "Add"]
    fused, _ = apply_pass(linear(), FUSE_MATMUL_ADD, backend="tensorrt", expect_count=1)
    assert op_types(fused) == ["Gemm"]


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("scale_first", [False, True])
@pytest.mark.parametrize("out_scale", [(), (1,), (8,), (1, 8)])
def test_output_scale_folds_into_weights(dtype: type, atol: float, scale_first: bool,
                                         out_scale: tuple[int, ...]) -> None:
    model = linear(dtype=dtype, out_scale=out_scale, scale_first=scale_first, bias_shape=None)
    fused, _ = apply_pass(model, FUSE_MATMUL_ADD, expect_count=1)
    assert op_types(fused) == ["MatMul", "Identity"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


@pytest.mark.parametrize(("dtype", "atol"), TOLERANCES)
@pytest.mark.parametrize("scale_first", [False, True])
def test_input_scale_and_bias_fold_to_one_gemm(dtype: type, atol: float,
                                               scale_first: bool) -> None:
    model = linear(dtype=dtype, in_scale=(), scale_first=scale_first, out_scale=(8,))
    fused, _ = apply_pass(model, FUSE_MATMUL_ADD, expect_count=3)
    assert op_types(fused) == ["Gemm"]
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


P = pytest.param


@pytest.mark.parametrize(
    ("variant", "rule", "reason"),
    [
        P({"as_inputs": ("bias",)}, "MatMulAddToGemm", "graph input", id="bias-is-input"),
        P({"as_inputs": ("w",)}, "MatMulAddToGemm", "graph input", id="weight-is-input"),
        P({"computed": ("w",)}, "MatMulAddToGemm", "'w' is not a constant",
          id="weight-computed"),
        P({"x_shape": (2, 5, 32), "computed": ("w",)}, "MatMulAddToReshapedGemm",
          "'w' is not a constant", id="weight-computed-rank3"),
        P({"bias_shape": None, "out_scale": (), "computed": ("w",)},
          "FoldOutputScaleIntoMatMul", "'w' is not a constant", id="weight-computed-scale"),
        P({"bias_shape": None, "in_scale": (), "computed": ("s_in",)},
          "FoldInputScaleIntoMatMul", "'s_in' is not a constant", id="input-scale-computed"),
        # An intermediate that is a graph output stops the matcher itself, before any check.
        P({"outputs": ("mm",)}, "MatMulAddToGemm", None, id="matmul-out-is-output"),
        P({"x_shape": ("m", 16), "bias_shape": (4, 8)}, "MatMulAddToGemm",
          "not a scalar or one value per column", id="bias-rows-vs-dynamic-m"),
        P({"x_shape": (2, 16), "n": 8, "bias_shape": (1, 1, 8)}, "MatMulAddToGemm",
          "higher rank", id="bias-raises-rank"),
        P({"dtype": np.int32}, "MatMulAddToGemm", "types must be", id="int32"),
        P({"x_shape": ("b", "s", 32)}, "MatMulAddToReshapedGemm", "at most one",
          id="two-dynamic-dims"),
        P({"bias_shape": None, "out_scale": (4, 1)}, "FoldOutputScaleIntoMatMul",
          "not a scalar or one value per column", id="per-row-scale"),
        P({"bias_shape": None, "out_scale": (1, 1, 8)}, "FoldOutputScaleIntoMatMul",
          "higher rank", id="scale-raises-rank"),
        P({"bias_shape": None, "out_scale": (), "share_weights": True},
          "FoldOutputScaleIntoMatMul", "also used by node 'other_matmul'", id="shared-weights"),
        P({"bias_shape": None, "out_scale": (), "outputs": ("mm",)},
          "FoldOutputScaleIntoMatMul", None, id="scaled-matmul-is-output"),
        P({"bias_shape": None, "in_scale": (16,)}, "FoldInputScaleIntoMatMul", "only a scalar",
          id="input-scale-not-scalar"),
        P({"bias_shape": None, "in_scale": (1, 1, 1)}, "FoldInputScaleIntoMatMul",
          "raise the rank", id="input-scale-raises-rank"),
        P({"bias_shape": None, "in_scale": (), "outputs": ("scaled_x",)},
          "FoldInputScaleIntoMatMul", None, id="scaled-input-is-output"),
    ],
)
def test_unsafe_variants_are_refused_with_a_reason(variant: dict, rule: str,
                                                  reason: str | None) -> None:
    model = linear(**variant)
    fused, report = apply_pass(model, FUSE_MATMUL_ADD, expect_count=0)
    assert op_types(fused) == [n.op_type for n in model.graph.node]
    if reason is not None:
        assert any(reason in r for r in refusals(report, rule)), report


def exported_block() -> onnx.ModelProto:
    """Relu → Mul(·, 0.125) → MatMul → Add(bias, ·) → Relu, weights as Constant nodes, no
    shapes recorded past the input: what an exporter writes, and what cleanup prepares."""
    rng = np.random.default_rng(3)
    constants = {"w": rng.standard_normal((32, 24)).astype(np.float32),
                 "bias": rng.standard_normal(24).astype(np.float32),
                 "scale": np.array(0.125, np.float32)}
    nodes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))
             for name, value in constants.items()]
    nodes += [helper.make_node("Relu", ["x"], ["r"]),
              helper.make_node("Mul", ["r", "scale"], ["scaled"]),
              helper.make_node("MatMul", ["scaled", "w"], ["mm"]),
              helper.make_node("Add", ["bias", "mm"], ["lin"]),
              helper.make_node("Relu", ["lin"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 24])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_cleanup_prepares_an_exported_block_for_fusion() -> None:
    model = exported_block()
    ir_model = ir.from_proto(model)
    report = run_passes(ir_model, [CLEANUP, FUSE_MATMUL_ADD], backend="onnxruntime")
    fused = ir.to_proto(ir_model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.applied("fuse_matmul_add") == 2, report
    assert op_types(fused) == ["Relu", "Reshape", "Gemm", "Reshape", "Relu"]
    assert len(fused.graph.initializer) == 4  # W * 0.125, bias and the two shapes
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


@settings(max_examples=30, deadline=None)
@given(
    lead=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    k=st.sampled_from([1, 3, 16, 40]),
    n=st.integers(1, 12),
    bias=st.sampled_from(["n", (1,), (), None]),
    bias_first=st.booleans(),
    out_scale=st.sampled_from([None, (), (1,), "n"]),
    in_scale=st.sampled_from([None, (), (1,)]),
    scale_first=st.booleans(),
    tap=st.sampled_from([(), (), ("mm",), ("scaled_x",)]),
    share_weights=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fuse_matmul_add_is_equivalent_on_random_linears(
    lead: list[int], k: int, n: int, bias: tuple[int, ...] | str | None, bias_first: bool,
    out_scale: tuple[int, ...] | str | None,
    in_scale: tuple[int, ...] | None, scale_first: bool, tap: tuple[str, ...],
    share_weights: bool, seed: int,
) -> None:
    if "scaled_x" in tap and in_scale is None:
        tap = ()
    model = linear(x_shape=(*lead, k), n=n, bias_shape=bias, bias_first=bias_first,
                   out_scale=(n,) if out_scale == "n" else out_scale, in_scale=in_scale,
                   scale_first=scale_first, outputs=tap, share_weights=share_weights, seed=seed)
    fused, _ = apply_pass(model, FUSE_MATMUL_ADD)
    assert [o.name for o in fused.graph.output] == [o.name for o in model.graph.output]
    assert_outputs_close(model, fused, atol=1e-4, rtol=1e-4, seed=seed)
