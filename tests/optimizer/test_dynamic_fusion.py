"""Fusion for TensorRT on partly-dynamic models (the model.profiled.onnx of a job with
optimization profiles): rules either refuse a dynamic dim, saying so in the report, or produce a
graph that is right at every shape of the profile, not only the one it was fused at.

The fused models hold fuseforge plugin nodes; they run in ONNX Runtime once decomposed into standard
ops (`decompose_for_onnxruntime`), and are compared with the original at the profile's min, opt and
max shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from optimizer.backends.tensorrt.profiles import resolve_profiles
from optimizer.fusion_report import FusionReport
from optimizer.model.shapes import fix_input_shapes, fix_input_shapes_except
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.plugins import decompose_for_onnxruntime
from optimizer.testing.passes import run_model
from optimizer.testing.real_models import BERT_FORMS, bert_encoder, resnet50

HIDDEN = 256
LAYERS = 2


def _set_dims(value: onnx.ValueInfoProto, dims: Sequence[int | str]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for dim in dims:
        if isinstance(dim, str):
            shape.dim.add().dim_param = dim
        else:
            shape.dim.add().dim_value = dim


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def dynamic_bert(form: str) -> onnx.ModelProto:
    """`bert_encoder` as exporters write it with batch and seq as dynamic axes.

    The static encoder bakes both into its Reshape targets and its [1, 128, hidden] position
    table. With dynamic axes, torch writes a view's leading dims as Shape(x)[0:2] concatenated
    with the constant tail (heads, head_dim or hidden), and slices the position table to the
    sequence length; inputs are [batch, seq] and [batch, 1, 1, seq].
    """
    model = bert_encoder(layers=LAYERS, hidden=HIDDEN, form=form)  # type: ignore[arg-type]
    graph = model.graph
    constants = _constants(graph)
    graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "dyn/zero"),
                              numpy_helper.from_array(np.array([1], np.int64), "dyn/one")])
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["dyn/seq_len"], name="dyn/seq_len",
                         start=1, end=2),
        helper.make_node("Slice", ["embeddings.position_embeddings", "dyn/zero", "dyn/seq_len",
                                   "dyn/one"], ["dyn/positions"], name="dyn/positions"),
    ]
    for node in graph.node:
        inputs = list(node.input)
        if node.op_type == "Add" and "embeddings.position_embeddings" in inputs:
            node.input[inputs.index("embeddings.position_embeddings")] = "dyn/positions"
        if node.op_type == "Reshape":
            tail, lead, target = (f"dyn/{node.name}/{part}" for part in ("tail", "lead", "shape"))
            graph.initializer.append(numpy_helper.from_array(
                constants[node.input[1]][2:].astype(np.int64), tail))
            nodes.append(helper.make_node("Shape", [node.input[0]], [lead], name=lead,
                                          start=0, end=2))
            nodes.append(helper.make_node("Concat", [lead, tail], [target], name=target, axis=0))
            node.input[1] = target
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    _set_dims(graph.input[0], ["batch", "seq"])
    _set_dims(graph.input[1], ["batch", 1, 1, "seq"])
    _set_dims(graph.output[0], ["batch", "seq", HIDDEN])
    onnx.checker.check_model(model, full_check=True)
    return model


def profiled_model(model: onnx.ModelProto, profiles: Mapping[str, Any]) -> onnx.ModelProto:
    """What the load stage writes as model.profiled.onnx (worker/pipeline/steps/load.py)."""
    inputs = summarize_model(model).inputs
    resolved = resolve_profiles(inputs, profiles)
    shapes = {name: profile.opt for name, profile in resolved.items()}
    return fix_input_shapes_except(model, shapes, {
        name: [axis for axis, (low, high) in enumerate(zip(p.min, p.max, strict=True))
               if low != high] for name, p in resolved.items()})


def _bert_profiles(batch: tuple[int, int, int], seq: tuple[int, int, int]) -> dict[str, Any]:
    """Profiles for both inputs: they share batch and seq, so they take the same ranges."""
    return {
        "input_ids": {key: [batch[i], seq[i]] for i, key in enumerate(("min", "opt", "max"))},
        "attention_mask": {key: [batch[i], 1, 1, seq[i]]
                           for i, key in enumerate(("min", "opt", "max"))},
    }


def _bert_feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + seq)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[..., (3 * seq) // 4:] = -10000.0  # padding hides the last quarter
    return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
            "attention_mask": mask}


def _refused_nodes(report: FusionReport, rule: str) -> set[str]:
    return {refusal.node for stats in report.rules if stats.rule == rule
            for refusal in stats.refusals}


def _input_dims(model: onnx.ModelProto) -> list[list[int | str]]:
    return [[d.dim_param if d.HasField("dim_param") else d.dim_value
             for d in value.type.tensor_type.shape.dim] for value in model.graph.input]


@pytest.mark.parametrize("form", BERT_FORMS)
@pytest.mark.parametrize(
    ("batch", "seq", "dims"),
    [((1, 4, 8), (16, 64, 128), [["batch", "seq"], ["batch", 1, 1, "seq"]]),
     ((1, 4, 8), (128, 128, 128), [["batch", 128], ["batch", 1, 1, 128]])],
    ids=["batch-and-seq", "batch-only"],
)
def test_bert_fused_with_dynamic_dims_matches_the_original_at_min_opt_and_max(
    form: str, batch: tuple[int, int, int], seq: tuple[int, int, int],
    dims: list[list[int | str]],
) -> None:
    original = dynamic_bert(form)
    model = profiled_model(original, _bert_profiles(batch, seq))
    assert _input_dims(model) == dims

    fused, report = optimize_model(model, OptimizeOptions(backend="tensorrt"))

    onnx.checker.check_model(fused, full_check=True)
    assert _input_dims(fused) == dims  # fusion keeps the profiled axes dynamic
    # Every fusion either happened or is in the report as a refusal with its reason.
    assert report.ops_after["fuseforge.BiasGelu"] == LAYERS
    # Batch and seq are traced to the inputs' "batch" and "seq": every attention fuses, and
    # every residual Add + LayerNorm but the embeddings' (its position table broadcasts).
    assert report.ops_after["fuseforge.MultiHeadAttention"] == LAYERS
    assert report.ops_after["fuseforge.SkipLayerNorm"] == 2 * LAYERS
    assert report.ops_after["LayerNormalization"] == 1
    assert "Softmax" not in report.ops_after
    assert all(reason for stats in report.rules for reason in stats.refusals)
    decomposed = decompose_for_onnxruntime(fused)
    for index in range(3):
        feeds = _bert_feeds(batch[index], seq[index])
        np.testing.assert_allclose(run_model(decomposed, feeds)[0], run_model(original, feeds)[0],
                                   atol=1e-4, rtol=1e-3)


def test_resnet50_with_a_dynamic_batch_fuses_as_the_static_model_and_matches_at_every_batch(
) -> None:
    original = resnet50()
    profile = {"min": [1, 3, 224, 224], "opt": [2, 3, 224, 224], "max": [4, 3, 224, 224]}
    model = profiled_model(original, {"input": profile})
    assert _input_dims(model) == [["N", 3, 224, 224]]

    fused, report = optimize_model(model, OptimizeOptions(backend="tensorrt"))
    _, static_report = optimize_model(fix_input_shapes(original, {"input": [2, 3, 224, 224]}),
                                      OptimizeOptions(backend="tensorrt"))

    assert report.ops_after == static_report.ops_after
    assert report.applied_rules() == static_report.applied_rules()
    assert "BatchNormalization" not in report.ops_after
    assert _input_dims(fused) == [["N", 3, 224, 224]]
    decomposed = decompose_for_onnxruntime(fused)
    rng = np.random.default_rng(0)
    for batch in (1, 2, 4):
        feed = {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
        np.testing.assert_allclose(run_model(decomposed, feed)[0], run_model(original, feed)[0],
                                   atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("form", BERT_FORMS)
def test_bert_with_dynamic_dims_fuses_attention_for_onnxruntime_and_matches(form: str) -> None:
    original = dynamic_bert(form)
    model = profiled_model(original, _bert_profiles((1, 4, 8), (16, 64, 128)))

    fused, report = optimize_model(model, OptimizeOptions(backend="onnxruntime"))

    onnx.checker.check_model(fused, full_check=True)
    assert report.ops_after["com.microsoft.MultiHeadAttention"] == LAYERS
    assert "Softmax" not in report.ops_after
    for batch, seq in ((1, 16), (4, 64), (8, 128)):
        feeds = _bert_feeds(batch, seq)
        np.testing.assert_allclose(run_model(fused, feeds)[0], run_model(original, feeds)[0],
                                   atol=1e-4, rtol=1e-3)


def _read_split_shape_from(model: onnx.ModelProto, reshape: str, tensor: str) -> None:
    """Make the head split `reshape` read its leading dims from `tensor` instead of its input."""
    lead = f"dyn/{reshape}/lead"
    [node] = [n for n in model.graph.node if n.name == lead]
    node.input[0] = tensor


@pytest.mark.parametrize("backend", ["tensorrt", "onnxruntime"])
def test_attention_whose_split_reads_another_tensors_shape_is_refused(backend: str) -> None:
    model = dynamic_bert("dynamo")
    # "other" [p, q] has dims nothing ties to batch and seq: the split is not provably a view.
    model.graph.input.append(helper.make_tensor_value_info("other", onnx.TensorProto.FLOAT,
                                                           ["p", "q"]))
    _read_split_shape_from(model, "/encoder.layer.0.attention/Reshape", "other")
    profiles = _bert_profiles((1, 4, 8), (16, 64, 128))
    profiles["other"] = {"min": [1, 16], "opt": [4, 64], "max": [8, 128]}
    model = profiled_model(model, profiles)

    fused, report = optimize_model(model, OptimizeOptions(backend=backend))

    op = {"tensorrt": "fuseforge.MultiHeadAttention",
          "onnxruntime": "com.microsoft.MultiHeadAttention"}[backend]
    # Layer 1 is refused too: what layer 0 computes from [p, q] no longer traces to batch/seq.
    assert op not in report.ops_after
    rule = {"tensorrt": "PluginMultiHeadAttention", "onnxruntime": "FuseMultiHeadAttention"}
    reasons = [refusal.reason for stats in report.rules if stats.rule == rule[backend]
               for refusal in stats.refusals]
    assert any("query source" in r and "[p, q, 256]" in r for r in reasons), reasons

