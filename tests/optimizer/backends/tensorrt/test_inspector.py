"""The engine report parser, on engine inspector JSON written per TensorRT 10.x's and 11.x's
documented formats (fixtures/): layers, precisions, I/O tensors, and which ONNX nodes each
layer fused."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.backends.tensorrt.inspector import (
    EngineReport,
    LayerTensor,
    dtype_of,
    node_op_types,
    nodes_from_metadata,
    nodes_from_name,
    parse_engine_information,
    parse_layer,
)
from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec
from optimizer.errors import InternalError

FIXTURES = Path(__file__).parent / "fixtures"
US, RS = "\x1f", "\x1e"  # the unit and record separators TensorRT joins metadata with

# The ONNX nodes behind the fixtures' engines: a small residual CNN.
NODE_OPS = {
    "/input_cast": "Cast", "/conv1/Conv": "Conv", "/bn1/BatchNormalization":
    "BatchNormalization", "/relu/Relu": "Relu", "/conv2/Conv": "Conv", "/Add": "Add",
    "/relu_1/Relu": "Relu", "/pool/GlobalAveragePool": "GlobalAveragePool",
    "/Flatten": "Flatten", "/fc/Gemm": "Gemm", "/Softmax": "Softmax",
    "/output_cast": "Cast", "/Identity_unused": "Identity",
}


def report(name: str) -> EngineReport:
    return parse_engine_information((FIXTURES / name).read_text())


# --- TensorRT 10.x, DETAILED verbosity -------------------------------------------------------

def test_10x_detailed_schema_layers_and_bindings():
    parsed = report("inspector_10x_detailed.json")

    assert parsed.schema == "10.x"
    assert len(parsed.layers) == 6
    assert [tensor.name for tensor in parsed.io_tensors] == [
        "input", "output", "input [profile 1]", "output [profile 1]"]
    assert all(tensor.mode is None for tensor in parsed.io_tensors)  # 10.x lists names only
    assert parsed.notes == ()


def test_10x_conv_bn_relu_layer_names_its_three_onnx_nodes():
    conv = report("inspector_10x_detailed.json").layers[1]

    assert conv.name == "/conv1/Conv + /bn1/BatchNormalization + /relu/Relu"
    assert conv.layer_type == "CaskConvolution"
    assert conv.parameter_type == "Convolution"
    assert conv.fused_onnx_nodes == ("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu")
    assert conv.nodes_source == "metadata"
    assert conv.tactic is not None and conv.tactic.startswith("sm90_xmma_fprop")


def test_10x_combined_format_datatype_text_gives_dtype_format_and_shape():
    conv = report("inspector_10x_detailed.json").layers[1]

    assert conv.precision == "fp32"
    assert conv.inputs[0] == LayerTensor(
        name="Reformatted Input Tensor 0 to /conv1/Conv + /bn1/BatchNormalization + /relu/Relu",
        dtype="fp32", format="Channel major FP32 format where channel % 4 == 0",
        shape=(8, 3, 32, 32))


def test_10x_reformat_layer_fuses_no_onnx_node():
    reformat = report("inspector_10x_detailed.json").layers[0]

    assert reformat.layer_type == "Reformat"
    assert reformat.fused_onnx_nodes == ()
    assert reformat.nodes_source == "none"


def test_myelin_region_lists_every_node_from_metadata_joined_by_record_separators():
    myelin = report("inspector_10x_detailed.json").layers[4]

    assert myelin.layer_type == "Myelin"
    assert myelin.fused_onnx_nodes == ("/Flatten", "/fc/Gemm", "/Softmax")


def test_layers_of_other_profiles_are_kept_apart():
    parsed = report("inspector_10x_detailed.json")

    assert [layer.profile for layer in parsed.layers] == [0, 0, 0, 0, 0, 1]
    assert len(parsed.profile_layers(0)) == 5
    assert parsed.profile_layers(1)[0].fused_onnx_nodes == ("/pool/GlobalAveragePool",)


def test_10x_summary_shows_the_conv_bn_relu_view():
    summary = report("inspector_10x_detailed.json").summary(NODE_OPS)

    assert summary["schema"] == "10.x"
    assert summary["profiles"] == 2 and summary["layers"] == 5
    assert summary["patterns"] == {"Conv + Add + Relu": 1,
                                   "Conv + BatchNormalization + Relu": 1,
                                   "Flatten + Gemm + Softmax": 1}
    assert summary["fused_layers"] == 3
    assert summary["reformat_layers"] == 1
    assert summary["layer_types"] == {"CaskConvolution": 2, "CaskPooling": 1, "Myelin": 1,
                                      "Reformat": 1}
    assert summary["precisions"] == {"fp32": 5}
    assert summary["fusions"][0] == {
        "layer": "/conv1/Conv + /bn1/BatchNormalization + /relu/Relu",
        "layer_type": "CaskConvolution",
        "onnx_nodes": ["/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu"],
        "onnx_ops": ["Conv", "BatchNormalization", "Relu"],
        "pattern": "Conv + BatchNormalization + Relu"}


def test_summary_names_onnx_nodes_no_layer_computes():
    summary = report("inspector_10x_detailed.json").summary(NODE_OPS)

    # The fp32 engine has no casts, and TensorRT removed the Identity.
    assert summary["onnx_nodes_not_in_layers_sample"] == [
        "/input_cast", "/output_cast", "/Identity_unused"]
    assert summary["onnx_nodes_not_in_layers"] == 3
    assert summary["onnx_nodes_in_layers"] == 10


def test_summary_is_plain_json():
    summary = report("inspector_11x_detailed.json").summary(NODE_OPS)

    assert json.loads(json.dumps(summary)) == summary


# --- TensorRT 11.x, DETAILED verbosity -------------------------------------------------------

def test_11x_schema_and_io_tensors_with_mode_dtype_and_profiles():
    parsed = report("inspector_11x_detailed.json")

    assert parsed.schema == "11.x"
    first = parsed.io_tensors[0]
    assert (first.name, first.mode, first.dtype, first.shape) == (
        "input", "input", "fp32", (-1, 3, 32, 32))
    assert first.profiles == (OptimizationProfileSpec((1, 3, 32, 32), (8, 3, 32, 32),
                                                      (32, 3, 32, 32)),)
    assert parsed.io_tensors[1].mode == "output"


def test_11x_split_datatype_and_format_fields_are_both_read():
    conv = report("inspector_11x_detailed.json").layers[1]

    assert conv.precision == "fp16"
    assert conv.outputs[0].dtype == "fp16"
    assert conv.outputs[0].format == "Channel major FP16 format where channel % 8 == 0 (kHWC8)"
    assert conv.fused_onnx_nodes == ("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu")


def test_11x_summary_of_an_fp16_engine():
    summary = report("inspector_11x_detailed.json").summary(NODE_OPS)

    assert summary["precisions"] == {"fp16": 3, "fp32": 1}
    assert summary["patterns"] == {
        "Conv + Add + Relu": 1, "Conv + BatchNormalization + Relu": 1,
        "GlobalAveragePool + Flatten + Gemm + Softmax + Cast": 1}
    assert summary["onnx_nodes_not_in_layers_sample"] == ["/Identity_unused"]


def test_10x_and_11x_reports_of_the_same_network_find_the_same_fusions():
    old = {f.onnx_nodes for f in report("inspector_10x_detailed.json").fusions()}
    new = {f.onnx_nodes for f in report("inspector_11x_detailed.json").fusions()}

    shared = {("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu"),
              ("/conv2/Conv", "/Add", "/relu_1/Relu")}
    assert shared <= old and shared <= new


def test_schema_is_recognised_from_layer_tensors_when_io_is_absent():
    for name, schema in (("inspector_10x_detailed.json", "10.x"),
                         ("inspector_11x_detailed.json", "11.x")):
        data = json.loads((FIXTURES / name).read_text())
        data.pop("Bindings", None)
        data.pop("I/O Tensors", None)
        assert parse_engine_information(json.dumps(data)).schema == schema


# --- Names only (LAYER_NAMES_ONLY), and fallbacks --------------------------------------------

def test_names_only_engine_reads_nodes_from_layer_names_and_says_so():
    parsed = report("inspector_10x_names_only.json")

    assert parsed.schema == "names-only"
    assert [layer.fused_onnx_nodes for layer in parsed.layers] == [
        (),
        ("/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu"),
        ("/conv2/Conv", "/Add", "/relu_1/Relu"),
        ("/act/Sigmoid", "/act/Mul"),
        ("/Flatten", "/Softmax"),  # a Myelin name gives only the ends of its region
    ]
    assert all(layer.precision is None for layer in parsed.layers)
    assert "DETAILED" in parsed.notes[0]


def test_detailed_layer_without_metadata_falls_back_to_its_name():
    layer = parse_layer({"Name": "/a/Conv + /a/Relu", "LayerType": "CaskConvolution",
                         "Inputs": [], "Outputs": []})

    assert layer.fused_onnx_nodes == ("/a/Conv", "/a/Relu")
    assert layer.nodes_source == "name"
    assert "layer names" in parse_engine_information(json.dumps(
        {"Layers": [{"Name": "/a/Conv + /a/Relu", "LayerType": "CaskConvolution"}],
         "Bindings": []})).notes[0]


def test_known_node_names_filter_what_layer_names_give():
    assert nodes_from_name("/conv/Conv + /conv/Conv_bias_shuffle + /relu/Relu",
                           known={"/conv/Conv", "/relu/Relu"}) == ("/conv/Conv", "/relu/Relu")
    parsed = parse_engine_information(
        json.dumps({"Layers": ["/x/MatMul + extra_reshape"]}), onnx_nodes={"/x/MatMul"})
    assert parsed.layers[0].fused_onnx_nodes == ("/x/MatMul",)


@pytest.mark.parametrize(("metadata", "nodes"), [
    (f"[ONNX Layer: a]{US}[ONNX Layer: b]", ("a", "b")),
    (f"[ONNX Layer: a]{RS}[ONNX Layer: b]{US}[ONNX Layer: c]", ("a", "b", "c")),
    ("[ONNX Layer: /blk/MatMul | /blk (Block)]", ("/blk/MatMul",)),
    (f"[ONNX Layer: a]{US}[ONNX Layer: a]", ("a",)),
    (f"[ONNX Layer: a]{US}[ONNX Lay ... ayer: z]{US}[ONNX Layer: q]", ("a", "q")),  # truncated
    ("", ()),
    ("free text", ()),
])
def test_metadata_parsing(metadata, nodes):
    assert nodes_from_metadata(metadata) == nodes


@pytest.mark.parametrize(("text", "dtype"), [
    ("Row major linear FP32", "fp32"), ("Float", "fp32"), ("Half", "fp16"),
    ("Channel major FP16 format where channel % 8 == 0", "fp16"),
    ("Row major linear BFloat16 format", "bf16"), ("BFloat16", "bf16"),
    ("Thirty-two wide channel vectorized row major Int8 format", "int8"),
    ("Row major linear FP8 format", "fp8"), ("Row major linear Int64 format", "int64"),
    ("Row major linear BOOL", "bool"), ("Row major linear UInt8 format", "uint8"),
    ("Int32", "int32"), ("Unknown format", None), (None, None), ("", None),
])
def test_dtype_of_tensorrt_texts(text, dtype):
    assert dtype_of(text) == dtype


def test_layer_precision_prefers_compute_types_over_indices():
    layer = parse_layer({"Name": "gather", "LayerType": "Gather", "Inputs": [
        {"Name": "ids", "DataType": "Int64"}, {"Name": "table", "DataType": "Half"}]})

    assert layer.precision == "fp16"


def test_long_fusions_are_summarised_by_op_counts():
    nodes = [f"/l{i}/{op}" for i in range(6) for op in ("MatMul", "Add", "Softmax")]
    metadata = US.join(f"[ONNX Layer: {node}]" for node in nodes)
    data = {"Layers": [{"Name": "{ForeignNode[/l0/MatMul.../l5/Softmax]}", "LayerType": "Myelin",
                        "Metadata": metadata}], "Bindings": []}
    ops = {node: node.rsplit("/", 1)[1] for node in nodes}

    fusion = parse_engine_information(json.dumps(data)).fusions(ops)[0]

    assert fusion.pattern == "18 nodes (MatMul x6, Add x6, Softmax x6)"
    assert len(fusion.onnx_nodes) == 18


def test_fusions_without_the_model_mark_ops_unknown():
    fusion = report("inspector_11x_detailed.json").fusions()[0]

    assert fusion.onnx_ops == ("?", "?", "?") and fusion.pattern == "? + ? + ?"


def test_a_single_layer_information_json_parses():
    raw = json.loads((FIXTURES / "inspector_11x_detailed.json").read_text())["Layers"][2]

    layer = parse_layer(json.loads(json.dumps(raw)))

    assert layer.fused_onnx_nodes == ("/conv2/Conv", "/Add", "/relu_1/Relu")


def test_empty_engine_information_gives_an_empty_report_with_a_note():
    parsed = parse_engine_information("")

    assert parsed.layers == () and "no layers" in parsed.notes[0]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"Layers": 3}', '{"Layers": [3]}'])
def test_malformed_engine_information_is_an_internal_error(text):
    with pytest.raises(InternalError, match="engine information"):
        parse_engine_information(text)


def test_report_to_dict_is_json():
    data = report("inspector_10x_detailed.json").to_dict()

    assert json.loads(json.dumps(data))["layers"][1]["fused_onnx_nodes"] == [
        "/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu"]


def test_node_op_types_names_ops_and_domains():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/relu/Relu"),
             helper.make_node("SkipLayerNorm", ["y", "y"], ["z"], name="/sln",
                              domain="fuseforge"),
             helper.make_node("Relu", ["z"], ["w"])]  # unnamed: cannot appear in a report
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [1])],
                              [helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("fuseforge", 1)])

    assert node_op_types(model) == {"/relu/Relu": "Relu", "/sln": "fuseforge.SkipLayerNorm"}
    assert isinstance(model, onnx.ModelProto)


@pytest.mark.parametrize(("dtype", "shape", "size"), [
    ("fp32", (1, 3, 4, 4), 192), ("fp16", (2, 8), 32), ("bf16", (2, 8), 32),
    ("fp8", (16,), 16), ("int64", (3,), 24), ("int4", (3,), 2),  # packed, rounded up
    ("fp4", (4, 4), 8), ("fp32", (-1, 8), 0),  # a dynamic dim counts no elements
])
def test_a_layer_tensors_size_comes_from_the_onnx_types_bit_width(
        dtype: str, shape: tuple[int, ...], size: int) -> None:
    tensor = LayerTensor("t", dtype, None, shape)

    assert tensor.size_bytes == size


@pytest.mark.parametrize("tensor", [LayerTensor("t", None, None, (4,)),
                                    LayerTensor("t", "fp32", None, None),
                                    LayerTensor("t", "mystery", None, (4,))])
def test_a_layer_tensor_of_unknown_type_or_shape_has_no_size(tensor: LayerTensor) -> None:
    assert tensor.size_bytes is None
