"""Fusion provenance: every node of a fused model, and of ONNX Runtime's session graph of it,
names the original nodes it came from."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.measure.provenance import compose, node_ids, node_provenance
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes.origins import merge_origins, origins_of
from optimizer.testing.models import small_cnn
from optimizer.testing.real_models import bert_encoder


def _session_graph(model: onnx.ModelProto, tmp_path: Path) -> onnx.GraphProto:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "session.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(tmp_path / "session.onnx")).graph


def test_each_fused_node_names_the_original_nodes_it_swallowed() -> None:
    original = small_cnn(seed=2)
    fused, report = optimize_model(original, OptimizeOptions())

    provenance = node_provenance(original.graph, fused.graph)

    assert report.nodes_after < report.nodes_before
    assert set(provenance) == set(node_ids(fused.graph))
    assert all(provenance.values()), provenance
    # conv1 -> bn1 -> relu1 is one node now, conv2 -> bn2 another (Add+Relu is left to ORT).
    assert ("conv1", "bn1", "relu1") in provenance.values()
    assert ("conv2", "bn2") in provenance.values()


def test_onnx_runtimes_layout_nodes_map_through_the_fused_model_to_the_original(
        tmp_path: Path) -> None:
    original = small_cnn(seed=2, batch=2)
    fused, _ = optimize_model(original, OptimizeOptions())
    session = _session_graph(fused, tmp_path)

    provenance = compose(node_provenance(original.graph, fused.graph),
                         node_provenance(fused.graph, session))

    assert any(n.domain == "com.microsoft.nchwc" for n in session.node)  # NCHWc did rewrite it
    assert set(provenance) == set(node_ids(session)) and all(provenance.values()), provenance
    reached = {o for origins in provenance.values() for o in origins}
    assert reached == set(node_ids(original.graph))
    # ORT's NCHWc Conv took the residual Add and the Relu in as well.
    assert ("conv2", "bn2", "residual", "relu2") in provenance.values()


def test_a_bert_encoders_engine_nodes_all_map_back_and_attention_names_its_parts(
        tmp_path: Path) -> None:
    original = bert_encoder(layers=1, hidden=64, heads=2, seq=16, batch=1)
    fused, _ = optimize_model(original, OptimizeOptions())
    session = _session_graph(fused, tmp_path)

    provenance = compose(node_provenance(original.graph, fused.graph),
                         node_provenance(fused.graph, session))

    assert all(provenance.values()), [n for n, o in provenance.items() if not o]
    op_of = {i: n.op_type for i, n in zip(node_ids(original.graph), original.graph.node,
                                          strict=True)}
    attention = [origins for node, origins in provenance.items()
                 if "Attention" in next(n.op_type for n in session.node if n.name == node)]
    assert attention, [n.op_type for n in session.node]
    assert {"MatMul", "Softmax"} <= {op_of[o] for o in attention[0]}


def test_renamed_tensors_are_traced_through_quantize_dequantize_pairs() -> None:
    # relu1 -> Q -> DQ -> conv2: the Conv reads a converted copy of relu1's output.
    original = small_cnn(seed=4)
    derived = onnx.GraphProto()
    derived.CopyFrom(original.graph)
    conv = next(n for n in derived.node if n.name == "conv2")
    quantize = onnx.helper.make_node("QuantizeLinear", ["r1", "s", "z"], ["r1_q"], name="q")
    dequantize = onnx.helper.make_node("DequantizeLinear", ["r1_q", "s", "z"], ["r1_dq"], name="dq")
    conv.input[0] = "r1_dq"
    derived.node.insert(list(derived.node).index(conv), quantize)
    derived.node.insert(list(derived.node).index(conv), dequantize)

    provenance = node_provenance(original.graph, derived)

    assert provenance["conv2"] == ("conv2",)
    # A conversion is credited to the node whose values it converts.
    assert provenance["q"] == ("relu1",) and provenance["dq"] == ("relu1",)
    assert provenance["relu1"] == ("relu1",)


def test_origin_tags_merge_as_ordered_sets_and_survive_bad_input() -> None:
    assert origins_of(merge_origins('["a", "b"]', '["b", "c"]')) == ["a", "b", "c"]
    assert origins_of("not json") == [] and origins_of('{"a": 1}') == []
    assert np.array_equal(origins_of('["x,y"]'), ["x,y"])  # names may hold the separator
