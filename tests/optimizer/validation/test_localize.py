"""Divergence localisation names the first node whose output leaves the original's, and why.

Faults are planted by hand: a weight scaled or noised in one layer, a fused node's bias or
attribute changed after a correct optimization, a layer computed in float16, a layer widened.
Correct fusions must localise nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxscript.rewriter import RULE_NAME_TAG

from optimizer.errors import InternalError, UnsupportedModelError
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import convert_precision
from optimizer.testing.models import IR_VERSION, OPSET, mlp, small_cnn
from optimizer.testing.real_models import BertForm, bert_encoder
from optimizer.validation.intermediates import (
    IntermediateReader,
    intermediate_values,
    topological_nodes,
)
from optimizer.validation.localize import Divergence, localize_divergence, shared_tensors
from optimizer.validation.tolerances import default_tolerances

FP32 = default_tolerances("fp32")
Feeds = list[dict[str, np.ndarray]]


def deep_mlp(layers: int = 6, width: int = 16, seed: int = 0, half: bool = False,
             widen: int | None = None) -> onnx.ModelProto:
    """input [4, width] float32 → (MatMul "fc{i}" → Add "fc{i}_bias" → Relu "relu{i}") × layers.

    `half`: cast the input to float16 ("cast_input") and run every layer in float16 (a
    candidate that changed precision). `widen`: layer `widen` gets one extra output unit (and
    the next layer one extra input row), so its tensors change shape but the output does not.
    """
    rng = np.random.default_rng(seed)
    dtype = np.float16 if half else np.float32
    nodes, weights = [], []
    x = "input"
    if half:
        nodes.append(helper.make_node("Cast", ["input"], ["input_half"], name="cast_input",
                                      to=TensorProto.FLOAT16))
        x = "input_half"
    for i in range(layers):
        rows = width + (1 if widen is not None and i == widen + 1 else 0)
        cols = width + (1 if i == widen else 0)
        # Draw the shared part first so widening leaves every other weight as it was.
        w = rng.normal(0, 1 / np.sqrt(width), (width, width))
        b = rng.normal(0, 0.1, width)
        w = np.pad(w, ((0, rows - width), (0, cols - width)), constant_values=0.05)
        b = np.pad(b, (0, cols - width), constant_values=0.05)
        weights += [numpy_helper.from_array(w.astype(dtype), f"fc{i}.w"),
                    numpy_helper.from_array(b.astype(dtype), f"fc{i}.b")]
        nodes += [helper.make_node("MatMul", [x, f"fc{i}.w"], [f"mm{i}"], name=f"fc{i}"),
                  helper.make_node("Add", [f"mm{i}", f"fc{i}.b"], [f"pre{i}"], name=f"fc{i}_bias")]
        x = f"pre{i}"
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [x], [f"h{i}"], name=f"relu{i}"))
            x = f"h{i}"
    nodes[-1].output[0] = "output"
    out_type = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "deep_mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, width])],
        [helper.make_tensor_value_info("output", out_type, [4, width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def with_weight(model: onnx.ModelProto, name: str,
                change: Callable[[np.ndarray], np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose weight `name` is replaced by `change(weight)`."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    (tensor,) = [t for t in changed.graph.initializer if t.name == name]
    tensor.CopyFrom(numpy_helper.from_array(
        change(numpy_helper.to_array(tensor)).astype(numpy_helper.to_array(tensor).dtype), name))
    return changed


def noise(seed: int, scale: float) -> Callable[[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    return lambda w: w + rng.normal(0, scale, w.shape)


def float_feeds(shape: tuple[int, ...], seed: int, count: int = 3) -> Feeds:
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def bert_feeds(seq: int, seed: int, count: int = 3, vocab: int = 1000) -> Feeds:
    """Token ids and an additive mask that hides a random tail of each sequence."""
    rng = np.random.default_rng(seed)
    feeds: Feeds = []
    for _ in range(count):
        mask = np.zeros((1, 1, 1, seq), np.float32)
        mask[..., rng.integers(seq // 2, seq):] = -10000.0
        feeds.append({"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64),
                      "attention_mask": mask})
    return feeds


def small_bert(seed: int, form: BertForm = "dynamo") -> onnx.ModelProto:
    return bert_encoder(layers=2, hidden=32, heads=2, seq=16, seed=seed, form=form)


def node_producing(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto:
    (node,) = [n for n in model.graph.node if tensor in n.output]
    assert isinstance(node, onnx.NodeProto)
    return node


# Planted weight faults: the perturbed layer is named, not a later one.

@pytest.mark.parametrize("layer", [0, 2, 5])
@pytest.mark.parametrize("change", [lambda w: w * 1.01, noise(seed=7, scale=1e-2)],
                         ids=["scaled_1pct", "noise"])
def test_perturbed_weight_names_its_layer(layer: int,
                                          change: Callable[[np.ndarray], np.ndarray]) -> None:
    model = deep_mlp(seed=layer)
    candidate = with_weight(model, f"fc{layer}.w", change)

    divergence = localize_divergence(model, candidate, float_feeds((4, 16), seed=1), FP32)

    assert divergence is not None
    assert (divergence.node, divergence.op_type, divergence.tensor.name) == (
        f"fc{layer}", "MatMul", f"mm{layer}")
    assert divergence.changed_weights == (f"fc{layer}.w",)
    assert divergence.rules == () and divergence.precision_change is None
    assert [i.name for i in divergence.inputs] == ([f"h{layer - 1}"] if layer else [])
    assert f"changed weights fc{layer}.w" in divergence.produced_by


def test_perturbed_batch_norm_statistic_names_the_batch_norm() -> None:
    model = small_cnn(seed=3, batch=2)
    candidate = with_weight(model, "bn1.mean", lambda m: m + 0.05)

    divergence = localize_divergence(model, candidate, float_feeds((2, 3, 32, 32), seed=0), FP32)

    assert divergence is not None
    assert (divergence.node, divergence.op_type, divergence.tensor.name) == (
        "bn1", "BatchNormalization", "b1")
    assert divergence.changed_weights == ("bn1.mean",)


def test_perturbed_weight_is_found_through_a_fusion() -> None:
    """The fault was in the user's weights before optimization: the fused Gemm is named, its
    rule reported, and the changed weight it still reads by name."""
    model = deep_mlp(seed=5)
    fused, report = optimize_model(with_weight(model, "fc3.w", lambda w: w * 1.01),
                                   OptimizeOptions())

    divergence = localize_divergence(model, fused, float_feeds((4, 16), seed=2), FP32,
                                     fusion_report=report)

    assert divergence is not None
    assert divergence.op_type == "Gemm" and divergence.tensor.name == "pre3"
    assert divergence.replaced == ("fc3", "fc3_bias")
    assert divergence.rules == ("MatMulAddToGemm",) and divergence.passes == ("fuse_matmul_add",)
    assert divergence.changed_weights == ("fc3.w",)


# Correct fusions: no false alarm.

@pytest.mark.parametrize("seed", range(20))
def test_correct_fusion_of_small_cnn_localises_nothing(seed: int) -> None:
    model = small_cnn(seed=seed, batch=2)
    fused, report = optimize_model(model, OptimizeOptions())
    assert report.nodes_after < report.nodes_before
    feeds = float_feeds((2, 3, 32, 32), seed=seed)

    assert localize_divergence(model, fused, feeds, FP32, fusion_report=report) is None
    assert localize_divergence(model, model, feeds, FP32) is None


@pytest.mark.parametrize("form", ["dynamo", "torchscript"])
@pytest.mark.parametrize("seed", range(10))
def test_correct_fusion_of_bert_encoder_localises_nothing(seed: int, form: BertForm) -> None:
    model = small_bert(seed, form)
    fused, report = optimize_model(model, OptimizeOptions())
    assert report.applied("fuse_attention") == 2 and report.applied("fuse_layer_norm") == 5

    assert localize_divergence(model, fused, bert_feeds(16, seed), FP32,
                               fusion_report=report) is None


# A wrong fused node: named, with the rules that produced it.

@pytest.mark.parametrize("with_report", [True, False])
def test_wrong_fused_conv_bias_names_the_fused_node_and_its_rules(with_report: bool) -> None:
    model = small_cnn(seed=1, batch=2)
    fused, report = optimize_model(model, OptimizeOptions())
    conv = node_producing(fused, "r2")
    candidate = with_weight(fused, conv.input[2], lambda b: b + np.eye(1, b.size, 3)[0] * 0.05)

    divergence = localize_divergence(model, candidate, float_feeds((2, 3, 32, 32), seed=4), FP32,
                                     fusion_report=report if with_report else None)

    assert divergence is not None
    assert (divergence.node, divergence.op_type) == (conv.name, "com.microsoft.FusedConv")
    assert divergence.original_node == "relu2"
    assert divergence.replaced == ("conv2", "bn2", "residual", "relu2")
    assert set(divergence.rules) == {"FuseConvAddRelu", "FoldBatchNormIntoConv"}
    assert set(divergence.passes) == {"fuse_conv_add_relu", "fold_batch_norm"}
    assert [i.name for i in divergence.inputs] == ["r1"]
    assert divergence.changed_weights == ()  # the folded bias is a new tensor, not the user's
    assert f"at node {conv.name!r}" in divergence.describe()


def test_wrong_attention_scale_names_the_attention_node() -> None:
    model = small_bert(seed=2)
    fused, report = optimize_model(model, OptimizeOptions())
    candidate = onnx.ModelProto()
    candidate.CopyFrom(fused)
    # The second layer's attention, packed with its projections into one Attention op.
    second = [n for n in candidate.graph.node if n.op_type == "Attention"][1]
    [scale] = [a for a in second.attribute if a.name == "scale"]
    scale.f = 1.2 / np.sqrt(16)

    divergence = localize_divergence(model, candidate, bert_feeds(16, seed=2), FP32,
                                     fusion_report=report)

    assert divergence is not None
    assert (divergence.node, divergence.op_type) == (second.name, "com.microsoft.Attention")
    assert divergence.tensor.name == second.output[0]
    assert "PackAttentionProjections" in divergence.rules
    assert "pack_attention_projections" in divergence.passes
    # Its region starts at tensors both graphs hold that still agree (the hidden state it
    # reads is kept 2-D by sink_reshapes, so the region reaches back past layer 0's last
    # LayerNorm to what fed it).
    assert divergence.inputs
    assert "/encoder.layer.0.attention/Reshape_3" in {i.name for i in divergence.inputs}


# Precision, shapes, chunks.

def test_float16_candidate_is_compared_in_float64_and_named_a_precision_change() -> None:
    model, half = deep_mlp(seed=4), deep_mlp(seed=4, half=True)
    feeds = float_feeds((4, 16), seed=3)

    assert localize_divergence(model, half, feeds, default_tolerances("fp16")) is None
    divergence = localize_divergence(model, half, feeds, FP32)

    assert divergence is not None and divergence.node == "fc0"
    assert divergence.tensor.candidate_dtype == "float16"
    assert divergence.tensor.reference_dtype == "float32"
    assert divergence.precision_change == "Cast to float16 in node 'cast_input'"
    assert 0 < divergence.tensor.max_abs_err < 1e-2  # rounding, measured, not a dtype verdict


def test_convert_precision_output_is_named_a_precision_change_not_changed_weights() -> None:
    model = small_cnn(seed=2, batch=2)
    half, _ = convert_precision(model, "fp16")
    feeds = float_feeds((2, 3, 32, 32), seed=2)

    assert localize_divergence(model, half, feeds, default_tolerances("fp16")) is None
    divergence = localize_divergence(model, half, feeds, FP32)

    assert divergence is not None and divergence.node == "conv1"
    assert divergence.precision_change is not None and "float16" in divergence.precision_change
    assert divergence.changed_weights == ()  # conv1.w rounded to float16 is still conv1.w
    assert divergence.produced_by.startswith("precision change")


def test_shape_difference_is_a_divergence_at_the_layer_that_changed_it() -> None:
    model, wide = deep_mlp(seed=6), deep_mlp(seed=6, widen=2)
    divergence = localize_divergence(model, wide, float_feeds((4, 16), seed=5), FP32)

    assert divergence is not None and divergence.node == "fc2"
    assert (divergence.tensor.reference_shape, divergence.tensor.candidate_shape) == (
        (4, 16), (4, 17))
    assert divergence.to_dict()["tensor"]["max_abs_err"] is None  # infinite, strict JSON
    assert "has shape [4, 17] instead of the original's [4, 16]" in divergence.describe()


def bert_with_wrong_layer_norm() -> tuple[onnx.ModelProto, onnx.ModelProto, Feeds]:
    model = small_bert(seed=3)
    fused, _ = optimize_model(model, OptimizeOptions())
    # Layer 0's output LayerNorm, whose tensor both graphs hold (viewed back to 3-D after
    # sink_reshapes kept the hidden state 2-D).
    norm = [n for n in fused.graph.node if n.op_type == "LayerNormalization"][2]
    return model, with_weight(fused, norm.input[1], noise(seed=1, scale=0.05)), bert_feeds(16, 3)


def test_chunk_size_does_not_change_the_answer() -> None:
    model, candidate, feeds = bert_with_wrong_layer_norm()

    answers = {size: localize_divergence(model, candidate, feeds, FP32, chunk_size=size)
               for size in (1, 5, 1000)}

    assert answers[1] is not None and answers[1].op_type == "LayerNormalization"
    # The LayerNorm the rule wrote, moved below its view by sink_reshapes.
    assert answers[1].rules[0] == "FuseLayerNorm" and "sink_reshapes" in answers[1].rules
    assert answers[1].passes[0] == "fuse_layer_norm"
    assert answers[1] == answers[5] == answers[1000]


def test_chunks_stay_bounded_and_stop_at_the_divergent_one(monkeypatch: pytest.MonkeyPatch) -> None:
    model, candidate, feeds = bert_with_wrong_layer_norm()
    names = shared_tensors(model, candidate)
    requests: list[int] = []
    read = IntermediateReader.read

    def recording(self: IntermediateReader, chunk: list[str],
                  f: Feeds) -> list[dict[str, object]]:
        requests.append(len(chunk))
        return read(self, chunk, f)

    monkeypatch.setattr(IntermediateReader, "read", recording)
    divergence = localize_divergence(model, candidate, feeds, FP32, chunk_size=3)

    assert divergence is not None
    position = names.index(divergence.tensor.name)
    assert max(requests) == 3
    assert len(requests) == 2 * (position // 3 + 1) < 2 * -(-len(names) // 3)


# What is compared.

def test_fused_region_boundaries_keep_the_original_names() -> None:
    """The claim localisation rests on: a rewritten node whose value leaves its region (to a
    node no rule wrote, or to a graph output) carries a name from the original graph."""
    for model in (small_cnn(batch=2), mlp(), deep_mlp(), small_bert(0, "dynamo"),
                  small_bert(0, "torchscript"), small_bert(0, "dynamo_opset20")):
        fused, _ = optimize_model(model, OptimizeOptions())
        original_names = {name for node in model.graph.node for name in node.output}
        tagged = {name for node in fused.graph.node for name in node.output
                  if any(p.key == RULE_NAME_TAG for p in node.metadata_props)}
        leaving = {name for node in fused.graph.node
                   if not any(p.key == RULE_NAME_TAG for p in node.metadata_props)
                   for name in node.input} | {value.name for value in fused.graph.output}
        assert tagged & leaving <= original_names, model.graph.name
        assert tagged, model.graph.name


def test_only_tensors_both_graphs_produce_are_compared() -> None:
    model = small_cnn(batch=2)
    fused, _ = optimize_model(model, OptimizeOptions())
    # c1/b1/c2/b2/sum are fused away; the fused convs output the Relus' names.
    assert shared_tensors(model, fused) == ["r1", "r2", "pooled", "flat", "logits"]


def test_subgraph_tensors_are_not_compared_but_captured_values_are_computed() -> None:
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["h"], ["inner"], name="inner_relu")], "then", [],
        [helper.make_tensor_value_info("inner", TensorProto.FLOAT, [2, 4])])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["inner_neg"], name="inner_neg")], "else", [],
        [helper.make_tensor_value_info("inner_neg", TensorProto.FLOAT, [2, 4])])
    nodes = [helper.make_node("Mul", ["input", "k"], ["h"], name="scale"),
             helper.make_node("If", ["flag"], ["branched"], name="branch",
                              then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Add", ["branched", "k"], ["output"], name="shift")]

    def build(k: float) -> onnx.ModelProto:
        graph = helper.make_graph(
            nodes, "with_if",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 4]),
             helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 4])],
            [numpy_helper.from_array(np.full(4, k, np.float32), "k")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model

    model = build(2.0)
    feeds = [{"input": np.ones((2, 4), np.float32), "flag": np.array(True)}]
    assert shared_tensors(model, model) == ["h", "branched", "output"]
    (values,) = intermediate_values(model, ["branched"], feeds)
    assert np.asarray(values["branched"]).tolist() == [[2.0] * 4] * 2
    divergence = localize_divergence(model, build(2.5), feeds, FP32)
    assert divergence is not None and divergence.node == "scale"


def test_topological_order_repairs_an_unsorted_graph() -> None:
    model = deep_mlp(layers=3)
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(model)
    nodes = list(shuffled.graph.node)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(reversed(nodes))

    assert [n.name for n in topological_nodes(shuffled.graph)] == [n.name for n in model.graph.node]


def test_divergence_to_dict_is_strict_json() -> None:
    model = deep_mlp(seed=1)
    divergence = localize_divergence(model, with_weight(model, "fc1.b", lambda b: b + 1.0),
                                     float_feeds((4, 16), seed=0), FP32)
    assert isinstance(divergence, Divergence)
    data = divergence.to_dict()
    assert data["node"] == "fc1_bias" and data["changed_weights"] == ["fc1.b"]
    assert data["produced_by"] == "changed weights fc1.b"
    assert data["tolerances"] == FP32.to_dict() and data["samples"] == 3
    assert all(isinstance(value, float) for value in data["tensor"].values()
               if not isinstance(value, str | list))


def test_bad_arguments_are_refused() -> None:
    model = mlp()
    with pytest.raises(InternalError, match="at least one feed"):
        localize_divergence(model, model, [], FP32)
    with pytest.raises(InternalError, match="chunk_size 0"):
        localize_divergence(model, model, float_feeds((2, 16), 0), FP32, chunk_size=0)


def test_weights_left_in_external_files_are_refused() -> None:
    model = mlp()
    (weight,) = [t for t in model.graph.initializer if t.name == "fc1.w"]
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="weights.bin")
    with pytest.raises(UnsupportedModelError, match="'fc1.w'.*load_external_data=True"):
        localize_divergence(model, mlp(), float_feeds((2, 16), 0), FP32)


def test_a_region_no_rule_touched_reads_as_one_with_the_bisections_blame() -> None:
    # PP-OCRv5's detector: the region holds no rewrite, its inputs are within tolerance, and
    # bisection blames FoldBatchNormIntoConv. The text used to say "no rule ... touched these
    # nodes" next to that blame, as if the two contradicted each other.
    model = deep_mlp(seed=2)
    divergence = localize_divergence(model, with_weight(model, "fc2.w", lambda w: w * 1.01),
                                     float_feeds((4, 16), seed=1), FP32)
    assert divergence is not None
    untouched = replace(divergence, changed_weights=())

    text = untouched.describe(blamed=("FoldBatchNormIntoConv",))

    assert "touched these nodes" not in text
    assert ("Produced by no rewrite rule, precision change or weight change within this "
            "region: the difference comes in through its inputs") in text
    assert ("Bisection blames rule(s) FoldBatchNormIntoConv, whose rewrites before this region "
            "shift its inputs within tolerance") in text
    assert "Bisection blames" not in untouched.describe()
