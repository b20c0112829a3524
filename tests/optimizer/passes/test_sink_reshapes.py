"""sink_reshapes: rows views moved below last-axis ops, and round trips cancelled."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.model.graphs import op_histogram
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes.sink_reshapes import SINK_RESHAPES
from optimizer.testing import real_models
from optimizer.testing.passes import apply_pass, assert_outputs_close


def between_gemms(*, view: list[int], back: list[int], output_3d: bool = False
                  ) -> onnx.ModelProto:
    """x [6, 8] → Gemm → Reshape(view) → LayerNorm → MatMul [view[-1], 12] → Relu → Add bias →
    Reshape(back) → Gemm [12, 4], with random weights, biases and norm parameters; with
    `output_3d`, the Add's 3-D output is the graph output instead."""
    rng = np.random.default_rng(0)

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    last, rows_out = view[-1], int(np.prod(view[:-1]))
    inits = [const("w0", 8, 8), const("b0", 8), const("gamma", last), const("beta", last),
             const("w1", last, 12), const("bias", 12), const("w2", 12, 4), const("b2", 4),
             numpy_helper.from_array(np.array(view, np.int64), "view"),
             numpy_helper.from_array(np.array(back, np.int64), "back")]
    nodes = [helper.make_node("Gemm", ["x", "w0", "b0"], ["rows"]),
             helper.make_node("Reshape", ["rows", "view"], ["viewed"]),
             helper.make_node("LayerNormalization", ["viewed", "gamma", "beta"], ["normed"],
                              axis=-1),
             helper.make_node("MatMul", ["normed", "w1"], ["wide"]),
             helper.make_node("Relu", ["wide"], ["act"]),
             helper.make_node("Add", ["act", "bias"], ["biased"])]
    if output_3d:
        out = helper.make_tensor_value_info("biased", TensorProto.FLOAT, [*view[:-1], 12])
    else:
        nodes += [helper.make_node("Reshape", ["biased", "back"], ["flat"]),
                  helper.make_node("Gemm", ["flat", "w2", "b2"], ["out"])]
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [rows_out, 4])
    graph = helper.make_graph(nodes, "between_gemms",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8])],
                              [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_round_trip_across_last_axis_ops_disappears():
    model = between_gemms(view=[2, 3, 8], back=[-1, 12])

    fused, report = apply_pass(model, SINK_RESHAPES)

    assert "Reshape" not in op_histogram(fused)
    assert report.applied("sink_reshapes") > 0
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_a_3d_graph_output_keeps_its_shape():
    model = between_gemms(view=[2, 3, 8], back=[6, 12], output_3d=True)

    fused, _ = apply_pass(model, SINK_RESHAPES)

    [output] = fused.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [2, 3, 12]
    assert op_histogram(fused)["Reshape"] == 1  # the view, now right before the output
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-5)


def test_a_view_that_regroups_the_last_axis_stays():
    # [6, 8] → [2, 6, 4] splits rows' last axis: LayerNorm over 4 is not LayerNorm over 8.
    model = between_gemms(view=[2, 6, 4], back=[-1, 12])

    fused, report = apply_pass(model, SINK_RESHAPES)

    assert report.applied("sink_reshapes") == 0
    assert op_histogram(fused)["Reshape"] == 2


def test_a_bert_encoder_keeps_few_reshapes_and_its_outputs():
    model = real_models.bert_encoder(layers=2, hidden=64, heads=2, seq=16, form="torchscript")
    without, _ = optimize_model(model, OptimizeOptions(
        backend="onnxruntime", excluded_rules=("sink_reshapes",)))

    fused, report = optimize_model(model, OptimizeOptions(backend="onnxruntime"))

    assert report.applied("sink_reshapes") > 0
    assert op_histogram(fused).get("Reshape", 0) <= op_histogram(without)["Reshape"] // 2
    assert_outputs_close(model, fused, atol=2e-4, rtol=1e-3)
