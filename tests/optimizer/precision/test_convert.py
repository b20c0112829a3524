"""convert_precision: a valid low-precision graph, float32 where needed, Casts only where needed."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.precision import DEFAULT_KEEP, NO_KEEP, KeepPolicy, convert_precision
from optimizer.testing import models, real_models
from tests.optimizer.precision.models import finish, loud_layer_norm, tensor

LOW = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": models.mlp,
    "small_cnn": lambda: models.small_cnn(batch=2),
    "bert_dynamo": lambda: real_models.bert_encoder(layers=1, hidden=64, heads=2, seq=16),
    "bert_torchscript": lambda: real_models.bert_encoder(layers=1, hidden=64, heads=2, seq=16,
                                                         form="torchscript"),
    "bert_opset20": lambda: real_models.bert_encoder(layers=1, hidden=64, heads=2, seq=16,
                                                     form="dynamo_opset20"),
}


def io_types(model: onnx.ModelProto) -> list[tuple[str, int, list[int]]]:
    return [(v.name, v.type.tensor_type.elem_type,
             [d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in (*model.graph.input, *model.graph.output)]


def producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in model.graph.node for out in node.output}


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*graph.input, *graph.output, *graph.value_info)}
    types.update({t.name: t.data_type for t in graph.initializer})
    return types


def cast_chains(model: onnx.ModelProto) -> list[str]:
    made_by = producers(model)
    return [node.name for node in model.graph.node if node.op_type == "Cast"
            and node.input[0] in made_by and made_by[node.input[0]].op_type == "Cast"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_converted_model_passes_checker_keeps_io_and_has_no_cast_chains(name: str,
                                                                        precision: str) -> None:
    model = MODELS[name]()
    converted, report = convert_precision(model, precision)  # type: ignore[arg-type]
    onnx.checker.check_model(converted, full_check=True)
    assert io_types(converted) == io_types(model)
    assert cast_chains(converted) == []
    assert report.converted > 0
    # Every Cast either feeds a reader of another type or writes a graph output: none is idle.
    types = value_types(converted)
    for node in converted.graph.node:
        if node.op_type == "Cast":
            assert types[node.input[0]] != types[node.output[0]], node.name


@pytest.mark.parametrize("name", list(MODELS))
def test_matmul_and_conv_weights_are_stored_low_not_cast(name: str) -> None:
    model = MODELS[name]()
    converted, _ = convert_precision(model, "fp16")
    initializers = {t.name: t for t in converted.graph.initializer}
    cast_inputs = {n.input[0] for n in converted.graph.node if n.op_type == "Cast"}
    assert not cast_inputs & set(initializers), "a Cast reads a stored tensor"
    heavy = [n for n in converted.graph.node
             if n.op_type in ("MatMul", "Conv", "Gemm") and n.input[1] in initializers]
    assert heavy
    for node in heavy:
        weight = initializers[node.input[1]]
        assert weight.data_type == TensorProto.FLOAT16, node.name
        assert weight.name == node.input[1]
    # Original initializer names survive when every reader wanted the low type.
    original_names = {t.name for t in model.graph.initializer}
    assert {n.input[1] for n in heavy} <= original_names


def test_graph_io_becomes_low_precision_when_asked() -> None:
    converted, report = convert_precision(models.mlp(), "fp16", keep_io_types=False)
    onnx.checker.check_model(converted, full_check=True)
    assert [t for _, t, _ in io_types(converted)] == [TensorProto.FLOAT16] * 2
    assert [n.op_type for n in converted.graph.node].count("Cast") == 0
    assert report.casts_inserted == 0 and not report.keep_io_types


def test_default_keep_list_keeps_written_out_layer_norm_statistics_only() -> None:
    converted, report = convert_precision(loud_layer_norm("written"), "fp16")
    kept = {node.name for node in report.kept}
    assert kept == {"ln_mean", "ln_sub", "ln_pow", "ln_var", "ln_add_eps", "ln_sqrt", "ln_div"}
    assert {"fc1", "fc1_bias", "ln_gamma", "ln_beta", "fc2", "fc2_bias"} <= set(
        report.converted_nodes)
    types = value_types(converted)
    assert types["var"] == TensorProto.FLOAT and types["normed"] == TensorProto.FLOAT
    assert types["h"] == TensorProto.FLOAT16 and types["scaled"] == TensorProto.FLOAT16
    # One Cast up before the statistics (shared by ReduceMean and Sub), one down after Div,
    # one at each graph boundary; eps stays a float32 constant.
    assert report.casts_inserted == 4
    assert {t.name: t.data_type for t in converted.graph.initializer}["eps"] == TensorProto.FLOAT


def test_layer_normalization_op_stays_float32_by_default_and_converts_without_keep_list() -> None:
    model = loud_layer_norm("op")
    _, kept_report = convert_precision(model, "fp16")
    assert [(k.name, k.op_type) for k in kept_report.kept] == [("ln", "LayerNormalization")]
    assert "stash_type" in kept_report.kept[0].reason
    converted, bare_report = convert_precision(model, "fp16", keep_fp32=NO_KEEP)
    assert bare_report.kept == ()
    assert value_types(converted)["n"] == TensorProto.FLOAT16


def test_sensitive_ops_are_kept_with_their_reasons() -> None:
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"),
             helper.make_node("Softmax", ["e"], ["s"], name="softmax", axis=-1),
             helper.make_node("Pow", ["s", "three"], ["p"], name="cube"),
             helper.make_node("MatMul", ["p", "w"], ["y"], name="matmul")]
    inits = [tensor("three", np.array(3.0)), tensor("w", np.eye(8))]
    model = finish(nodes, inits, [("x", TensorProto.FLOAT, [2, 8])],
                   [("y", TensorProto.FLOAT, [2, 8])], opset=17)
    _, report = convert_precision(model, "fp16")
    reasons = {k.name: k.reason for k in report.kept}
    assert set(reasons) == {"exp", "softmax", "cube"}
    assert "11.1" in reasons["exp"] and "softmax" in reasons["softmax"]
    assert report.converted_nodes == ("matmul",)
    custom = KeepPolicy(ops={"MatMul": "test"})
    _, report = convert_precision(model, "fp16", keep_fp32=custom)
    assert [k.name for k in report.kept] == ["matmul"] and report.converted == 3


def test_regions_without_compute_stay_float32_by_default() -> None:
    # Add -> Relu between two float32 MatMuls (kept by name) gains nothing from float16.
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="first"),
             helper.make_node("Add", ["a", "b"], ["c"], name="bias"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="second")]
    inits = [tensor("w", np.eye(8)), tensor("b", np.ones(8))]
    model = finish(nodes, inits, [("x", TensorProto.FLOAT, [2, 8])],
                   [("y", TensorProto.FLOAT, [2, 8])], opset=17)
    converted, report = convert_precision(model, "fp16", extra_fp32_nodes=["first", "second"])
    assert report.converted == 0 and report.casts_inserted == 0
    assert {k.name: k.reason for k in report.kept}["relu"].startswith("converting it would only")
    _, bare = convert_precision(model, "fp16", keep_fp32=NO_KEEP,
                                extra_fp32_nodes=["first", "second"])
    assert bare.converted_nodes == ("bias", "relu") and bare.casts_inserted == 2


def test_extra_fp32_nodes_stay_float32_and_unknown_names_are_refused() -> None:
    converted, report = convert_precision(models.mlp(), "fp16", extra_fp32_nodes=["fc2"])
    assert [k.name for k in report.kept] == ["fc2", "fc2_bias"]
    assert report.kept[0].reason == "named in extra_fp32_nodes"
    types = value_types(converted)
    assert types["m2"] == TensorProto.FLOAT and types["h"] == TensorProto.FLOAT16
    # fc2's weight is read only in float32, so it stays float32 under its own name.
    assert {t.name: t.data_type for t in converted.graph.initializer}["fc2.w"] == TensorProto.FLOAT
    with pytest.raises(ValueError, match="'nope'"):
        convert_precision(models.mlp(), "fp16", extra_fp32_nodes=["nope"])


def test_constant_read_in_both_precisions_is_stored_twice() -> None:
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"], name="low_mul"),
             helper.make_node("Exp", ["a"], ["b"], name="exp"),
             helper.make_node("Add", ["b", "k"], ["y"], name="fp32_add")]
    model = finish(nodes, [tensor("k", np.full(4, 0.1))], [("x", TensorProto.FLOAT, [4])],
                   [("y", TensorProto.FLOAT, [4])], opset=17)
    converted, report = convert_precision(model, "fp16", keep_fp32=NO_KEEP,
                                          extra_fp32_nodes=["fp32_add"])
    stored = {t.name: t.data_type for t in converted.graph.initializer}
    assert stored == {"k": TensorProto.FLOAT, "k_fp16": TensorProto.FLOAT16}
    assert report.initializers_converted == 1


def test_constants_beyond_float16_range_saturate_and_are_reported() -> None:
    # A mask written with float32's lowest value, as Hugging Face models do.
    nodes = [helper.make_node("Where", ["keep", "x", "fill"], ["y"], name="mask")]
    model = finish(nodes, [tensor("fill", np.array(np.finfo(np.float32).min))],
                   [("keep", TensorProto.BOOL, [4]), ("x", TensorProto.FLOAT, [4])],
                   [("y", TensorProto.FLOAT, [4])], opset=17)
    converted, report = convert_precision(model, "fp16", keep_fp32=NO_KEEP)
    assert report.saturated_constants == ("fill",)
    fill = {t.name: t for t in converted.graph.initializer}["fill"]
    assert numpy_helper.to_array(fill).item() == -65504.0


def test_integer_and_shape_subgraphs_are_untouched() -> None:
    # y = Reshape(x * w, [n, -1]) with n = Cast(Floor(Cast(dim0 as float) * 1.0)) as int64.
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["dim0"], name="dim0", axis=0),
        helper.make_node("Cast", ["dim0"], ["dim0_f"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["dim0_f", "one"], ["scaled"], name="scale_dim"),
        helper.make_node("Floor", ["scaled"], ["floored"], name="floor"),
        helper.make_node("Cast", ["floored"], ["n"], name="to_int", to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"], name="n1"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="target", axis=0),
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="weigh"),
        helper.make_node("Reshape", ["xw", "target"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero_axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             tensor("one", np.array(1.0)),
             tensor("w", np.random.default_rng(0).normal(size=(6, 6)))]
    model = finish(nodes, inits, [("x", TensorProto.FLOAT, [4, 6])],
                   [("y", TensorProto.FLOAT, [4, 6])], opset=17)
    converted, report = convert_precision(model, "fp16")
    onnx.checker.check_model(converted, full_check=True)
    assert {k.name for k in report.kept} == {"scale_dim", "floor"}
    assert all("shape arithmetic" in k.reason for k in report.kept)
    types = value_types(converted)
    assert types["dim0_f"] == types["scaled"] == TensorProto.FLOAT
    assert types["xw"] == TensorProto.FLOAT16
    original = {n.name: n for n in model.graph.node}
    for name in ("shape", "dim0", "to_float", "to_int", "n1", "target"):
        assert {n.name: n for n in converted.graph.node}[name] == original[name], name
    ints = {t.name: t for t in converted.graph.initializer if t.data_type == TensorProto.INT64}
    assert set(ints) == {"zero", "zero_axes", "minus_one"}


def test_cast_to_float_read_only_in_low_precision_is_retyped() -> None:
    nodes = [helper.make_node("Cast", ["ids"], ["ids_f"], name="ids_to_float",
                              to=TensorProto.FLOAT),
             helper.make_node("Mul", ["ids_f", "x"], ["y"], name="mul")]
    model = finish(nodes, [], [("ids", TensorProto.INT64, [4]), ("x", TensorProto.FLOAT, [4])],
                   [("y", TensorProto.FLOAT, [4])], opset=17)
    converted, _ = convert_precision(model, "fp16", keep_fp32=NO_KEEP)
    cast = {n.name: n for n in converted.graph.node}["ids_to_float"]
    assert helper.get_attribute_value(cast.attribute[0]) == TensorProto.FLOAT16
    assert cast_chains(converted) == []


def test_contrib_ops_convert_only_where_schema_and_gpu_kernel_admit_the_type() -> None:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("FusedConv", ["x", "w"], ["c"], name="fused_conv",
                              domain="com.microsoft", activation="Relu"),
             helper.make_node("Gelu", ["c"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Mystery", ["g"], ["y"], name="custom", domain="example.custom")]
    model = finish(nodes, [tensor("w", rng.normal(size=(4, 3, 3, 3)))],
                   [("x", TensorProto.FLOAT, [1, 3, 8, 8])], [("y", TensorProto.FLOAT, None)],
                   opset=17, domains={"com.microsoft": 1, "example.custom": 1})
    for precision in ("fp16", "bf16"):
        _, report = convert_precision(model, precision, keep_fp32=NO_KEEP)  # type: ignore[arg-type]
        assert report.converted_nodes == ("gelu",)
        reasons = {k.name: k.reason for k in report.kept}
        assert "float32 only" in reasons["fused_conv"]  # schema says float16, CUDA kernel not
        assert "example.custom" in reasons["custom"]


def test_default_domain_ops_below_the_opset_that_admits_bfloat16_stay_float32() -> None:
    # Conv and GlobalAveragePool admit bfloat16 from opset 22; small_cnn is opset 17.
    _, report = convert_precision(models.small_cnn(batch=2), "bf16", keep_fp32=NO_KEEP)
    reasons = {k.name: k.reason for k in report.kept}
    assert set(reasons) == {"conv1", "conv2", "pool"}
    assert reasons["conv1"] == "the Conv schema admits no bfloat16 for T"
    _, fp16 = convert_precision(models.small_cnn(batch=2), "fp16", keep_fp32=NO_KEEP)
    assert fp16.kept == ()


def test_report_is_json_and_names_what_was_kept() -> None:
    _, report = convert_precision(real_models.bert_encoder(layers=1, hidden=128, heads=2, seq=16,
                                                           form="dynamo_opset20"), "fp16")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["precision"] == "fp16" and data["converted"] == report.converted
    assert {k["op_type"] for k in data["kept"]} == {"LayerNormalization", "Softmax"}
    assert "converted_nodes" not in data


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="'fp4'"):
        convert_precision(models.mlp(), "fp4")  # type: ignore[arg-type]


def test_input_model_is_not_modified() -> None:
    model = real_models.bert_encoder(layers=1, hidden=64, heads=2, seq=16)
    before = model.SerializeToString()
    convert_precision(model, "fp16", keep_fp32=DEFAULT_KEEP)
    assert model.SerializeToString() == before
