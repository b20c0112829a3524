"""DimTracer proves dynamic dims equal only where the ops prove it, and SkipLayerNorm relies on it.

Each graph has dims that ONNX shape inference names apart (a Reshape reading Shape(x), a
broadcast with a sliced table) and dims that really may differ (two inputs' differently named
dims); the tracer must join the first and keep the second apart.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.fuse_skip_layer_norm import FUSE_SKIP_LAYER_NORM
from optimizer.passes.symbolic_dims import DimTracer, ShapeProofError, reshape_dims
from optimizer.testing.models import IR_VERSION
from optimizer.testing.passes import apply_pass, run_model

HIDDEN = 8


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[str], initializers: list[onnx.TensorProto], *,
           data_prop: bool = True) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "dims", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outputs], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return onnx.shape_inference.infer_shapes(model, data_prop=data_prop)


def _traced(model: onnx.ModelProto) -> tuple[DimTracer, dict[str, ir.Value]]:
    graph = ir.from_proto(model).graph
    values = {v.name: v for node in graph for v in node.outputs if v.name}
    values.update({v.name: v for v in graph.inputs if v.name})
    return DimTracer(graph), values


def _embedding_model(position_dims: tuple[str, str]) -> onnx.ModelProto:
    """x [b, s, H] + table[:, :Shape(ids)[1]] → Reshape(., Shape(.)[0:2] ++ [2, H/2]) → back."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(1, 32, HIDDEN)).astype(np.float32), "table"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([2, HIDDEN // 2], np.int64), "tail")]
    inits.append(numpy_helper.from_array(np.array([HIDDEN], np.int64), "hidden"))
    nodes = [
        helper.make_node("Shape", ["ids"], ["seq"], start=1, end=2),
        helper.make_node("Slice", ["table", "zero", "seq", "one"], ["positions"]),
        helper.make_node("Add", ["x", "positions"], ["embedded"]),
        helper.make_node("Shape", ["embedded"], ["lead"], start=0, end=2),
        helper.make_node("Concat", ["lead", "tail"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["embedded", "split_shape"], ["split"]),
        helper.make_node("Concat", ["lead", "hidden"], ["lead_hidden"], axis=0),
        helper.make_node("Reshape", ["split", "lead_hidden"], ["merged"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", HIDDEN]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, list(position_dims))]
    return _model(nodes, inputs, ["merged"], inits)


def test_tracer_joins_a_sliced_broadcast_and_shape_read_reshapes_to_the_input_dims() -> None:
    tracer, values = _traced(_embedding_model(("b", "s")))
    assert tracer.dims(values["embedded"]) == (("sym", "b"), ("sym", "s"), HIDDEN)
    assert tracer.dims(values["split"]) == (("sym", "b"), ("sym", "s"), 2, HIDDEN // 2)
    assert tracer.dims(values["merged"]) == tracer.dims(values["x"])


@pytest.mark.parametrize(("start", "end", "expected"), [
    (-1, 2**63 - 1, (HIDDEN,)), (-2, -1, (("sym", "s"),)), (0, -2, (("sym", "b"), 4)),
    (-2**63, -2, (("sym", "b"), 4)), (1, 3, (4, ("sym", "s"))), (5, 9, ()),
], ids=["last", "negative-start", "up-to-negative-end", "int64-min-start", "middle", "past-end"])
def test_tracer_reads_a_slice_of_a_shapes_values(start: int, end: int,
                                                 expected: tuple[object, ...]) -> None:
    """As torch's SDPA export reads [B, N], T and H off Shape(K)."""
    inits = [numpy_helper.from_array(np.array([start], np.int64), "start"),
             numpy_helper.from_array(np.array([end], np.int64), "end")]
    nodes = [helper.make_node("Shape", ["k"], ["shape"]),
             helper.make_node("Slice", ["shape", "start", "end"], ["part"]),
             helper.make_node("Identity", ["k"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("k", TensorProto.FLOAT,
                                                         ["b", 4, "s", HIDDEN])], ["y"], inits)
    tracer, values = _traced(model)
    assert tracer.contents(values["part"]) == expected


def test_tracer_keeps_a_differently_named_dim_apart() -> None:
    # The table is sliced to ids' "t", which nothing ties to x's "s": the sum's dim 1 is unknown.
    tracer, values = _traced(_embedding_model(("b", "t")))
    embedded = tracer.dims(values["embedded"])
    assert embedded is not None and embedded[0] == ("sym", "b")
    assert embedded[1] != ("sym", "s") and embedded[1] != ("sym", "t")
    assert tracer.dims(values["merged"]) != tracer.dims(values["x"])


def _reshape(allowzero: int) -> ir.Node:
    return ir.Node("", "Reshape", [ir.Value(name="x"), ir.Value(name="shape")],
                   attributes=[ir.AttrInt64("allowzero", allowzero)], name="r")


B, S = ("sym", "b"), ("sym", "s")


@pytest.mark.parametrize(
    ("in_dims", "target", "allowzero", "expected"),
    [((B, S, 8), (0, 0, 2, 4), 0, (B, S, 2, 4)),
     ((B, S, 8), (0, -1, 2, 4), 0, (B, S, 2, 4)),
     ((B, S, 8), (B, S, 2, 4), 1, (B, S, 2, 4)),
     ((B, S, 2, 4), (-1, 8), 0, None),  # B*S is no single dim: refused, not guessed
     ((B, S, 8), (0, 0, 2, 4), 1, (0, 0, 2, 4)),  # allowzero: 0 is an empty dim, not a copy
     ((B, S, 8), (S, -1, 8), 0, (S, B, 8))]  # fine as dims; attention then sees [S, B]
)
def test_reshape_dims_resolves_copies_and_a_cancelling_minus_one_only(
    in_dims: tuple, target: tuple, allowzero: int, expected: tuple | None,
) -> None:
    if expected is None:
        with pytest.raises(ShapeProofError, match="needs a static input shape"):
            reshape_dims(_reshape(allowzero), in_dims, target)
    else:
        assert reshape_dims(_reshape(allowzero), in_dims, target) == expected


def _residual_layer_norm(skip_dims: list[str | int]) -> onnx.ModelProto:
    """LayerNormalization(x + Reshape(y, Shape(y)[0:2] ++ [H])): inference names the sum apart."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.1, HIDDEN).astype(np.float32), "beta"),
             numpy_helper.from_array(np.array([HIDDEN], np.int64), "hidden")]
    nodes = [
        helper.make_node("Shape", ["y"], ["lead"], start=0, end=2),
        helper.make_node("Concat", ["lead", "hidden"], ["target"], axis=0),
        helper.make_node("Reshape", ["y", "target"], ["skip"]),
        helper.make_node("Add", ["x", "skip"], ["total"]),
        helper.make_node("LayerNormalization", ["total", "gamma", "beta"], ["out"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", HIDDEN]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, skip_dims)]
    # Without data propagation inference cannot read the target: skip gets fresh dim names.
    return _model(nodes, inputs, ["out"], inits, data_prop=False)


def test_skip_layer_norm_fuses_when_the_dims_trace_to_the_same_input_dims() -> None:
    model = _residual_layer_norm(["b", "s", 2, HIDDEN // 2])
    shapes = {v.name: v.type.tensor_type.shape for v in model.graph.value_info}
    assert shapes["skip"] != model.graph.input[0].type.tensor_type.shape  # named apart

    fused, _ = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=1)

    rng = np.random.default_rng(2)
    for batch, seq in ((1, 3), (4, 7)):
        feeds = {"x": rng.normal(size=(batch, seq, HIDDEN)).astype(np.float32),
                 "y": rng.normal(size=(batch, seq, 2, HIDDEN // 2)).astype(np.float32)}
        np.testing.assert_allclose(run_model(fused, feeds)[0], run_model(model, feeds)[0],
                                   atol=1e-4, rtol=1e-4)


def test_skip_layer_norm_refuses_dims_named_apart_in_the_inputs() -> None:
    # y's "c" may be 1 while b is 4: the Add broadcasts, the kernel would not.
    model = _residual_layer_norm(["c", "s", 2, HIDDEN // 2])

    _, report = apply_pass(model, FUSE_SKIP_LAYER_NORM, expect_count=0)

    reasons = [r.reason for stats in report.rules for r in stats.refusals]
    assert any("differ in shape" in r and "traced: [b, s, 8] and [c, s, 8]" in r
               for r in reasons), reasons
