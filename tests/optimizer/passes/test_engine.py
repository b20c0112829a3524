"""The pass engine: fixed point, per-rule counts, refusals, backend skips, and what it leaves alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from optimizer.optimize import OptimizeOptions, optimize_model, select_passes
from optimizer.passes.base import FusionPass
from optimizer.passes.engine import run_passes
from optimizer.passes.fold_batch_norm import FOLD_BATCH_NORM, FoldBatchNormIntoConv
from optimizer.passes.fuse_layer_norm import FuseLayerNorm, FuseLayerNormScaleOnly
from optimizer.passes.matching import OpsPresent
from optimizer.testing.models import small_cnn
from optimizer.testing.norm_models import conv_bn, layer_norm


def test_run_passes_counts_each_rule_and_reaches_a_fixed_point() -> None:
    report = run_passes(ir.from_proto(small_cnn()), [FOLD_BATCH_NORM], backend="onnxruntime")
    assert report.applied("FoldBatchNormIntoConv") == 2
    assert report.applied("fold_batch_norm") == 2
    assert report.iterations == 1  # one round that fires; the dry run then finds nothing left
    assert report.ops_before["BatchNormalization"] == 2
    assert "BatchNormalization" not in report.ops_after
    assert report.nodes_before - report.nodes_after == 2


def test_pass_without_lowering_for_the_backend_is_skipped_with_a_reason() -> None:
    ort_only = FusionPass(name="ort_only", summary="test", stage="other",
                          rules={"onnxruntime": [FoldBatchNormIntoConv.rule()]})
    report = run_passes(ir.from_proto(small_cnn()), [ort_only], backend="tensorrt")
    assert report.passes_run == ()
    assert "no tensorrt lowering" in report.passes_skipped["ort_only"]
    assert report.nodes_after == report.nodes_before


def test_refusals_are_recorded_with_the_node_and_reason() -> None:
    report = run_passes(ir.from_proto(conv_bn(share_weights=True)), [FOLD_BATCH_NORM],
                        backend="onnxruntime")
    [stats] = [s for s in report.rules if s.rule == "FoldBatchNormIntoConv"]
    assert stats.applied == 0
    assert stats.refusals[0].node == "bn"
    assert "'w' is also used by node 'other_conv'" in stats.refusals[0].reason


def test_off_by_default_pass_runs_only_when_named() -> None:
    slow = FusionPass(name="slow", summary="test", stage="other",
                      rules={"onnxruntime": [FoldBatchNormIntoConv.rule()]},
                      off_by_default={"onnxruntime": "measured 0.8x"})
    chosen, skipped = select_passes(OptimizeOptions(passes="all", catalog=(slow,)))
    assert chosen == [] and "measured 0.8x" in skipped["slow"]
    assert select_passes(OptimizeOptions(passes=["slow"], catalog=(slow,)))[0] == [slow]
    assert select_passes(OptimizeOptions(backend="tensorrt", catalog=(slow,)))[0] == [slow]


def test_optimize_model_leaves_foreign_domains_alone_and_says_so() -> None:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Mystery", ["x"], ["m"], domain="com.example"),
         helper.make_node("Relu", ["m"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "unused")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    fused, report = optimize_model(model, OptimizeOptions(passes="all"))
    assert [n.op_type for n in fused.graph.node] == ["Mystery", "Relu"]
    assert any("domain 'com.example'" in note for note in report.notes)


def test_optimize_model_does_not_modify_its_input() -> None:
    model = small_cnn()
    before = model.SerializeToString()
    optimize_model(model, OptimizeOptions())
    assert model.SerializeToString() == before
    assert isinstance(onnx.load_from_string(before), onnx.ModelProto)


def test_replaced_weights_do_not_stay_behind_as_unused_initializers() -> None:
    model = small_cnn()
    fused, _ = optimize_model(model, OptimizeOptions(passes=["fold_batch_norm"]))
    used = {name for node in fused.graph.node for name in node.input}
    assert {init.name for init in fused.graph.initializer} <= used
    weights = sum(init.ByteSize() for init in fused.graph.initializer)
    assert weights < sum(init.ByteSize() for init in model.graph.initializer)


def test_every_default_pass_on_a_convnet_reaches_its_fixed_point_in_one_round() -> None:
    # The replaced weights go after each round that changed something, so the dry run's
    # clean-up finds no work left and asks for no second round.
    fused, report = optimize_model(small_cnn(), OptimizeOptions(backend="onnxruntime"))
    assert report.iterations == 1
    assert report.applied("cleanup") == 0
    assert report.applied("FoldBatchNormIntoConv") == 2


def test_a_rule_is_tried_only_on_a_graph_holding_the_op_at_its_patterns_root() -> None:
    rule = FoldBatchNormIntoConv.rule()
    with_bn = ir.from_proto(small_cnn())
    without_bn = ir.from_proto(optimize_model(small_cnn(), OptimizeOptions(
        passes=["fold_batch_norm"]))[0])

    assert OpsPresent(with_bn).may_match(rule)
    assert not OpsPresent(without_bn).may_match(rule)


def test_a_rule_is_tried_only_on_a_graph_holding_every_op_its_pattern_names() -> None:
    # The root (the Add of beta) and all but one op present: the ReduceMeans are ReduceMax.
    rule = FuseLayerNorm.rule()
    model = layer_norm()
    no_mean = onnx.ModelProto.FromString(model.SerializeToString())
    for node in no_mean.graph.node:
        if node.op_type == "ReduceMean":
            node.op_type = "ReduceMax"

    assert OpsPresent(ir.from_proto(model)).may_match(rule)
    assert not OpsPresent(ir.from_proto(no_mean)).may_match(rule)


def test_ops_of_an_or_values_alternatives_are_not_required() -> None:
    # d * d for the square (Pow is the other alternative), no epsilon Add, no beta Add: the
    # graph holds no Pow and no Add, and the rule still matches and fuses.
    model = layer_norm(square="mul", epsilon=None, bias=False, opset=18)
    assert not {"Pow", "Add"} & {node.op_type for node in model.graph.node}

    assert OpsPresent(ir.from_proto(model)).may_match(FuseLayerNormScaleOnly.rule())
    fused, report = optimize_model(model, OptimizeOptions(passes=["fuse_layer_norm"]))
    assert report.applied("FuseLayerNormScaleOnly") == 1
