"""write_model_file writes a model a tensor at a time, and the file holds exactly the bytes
SerializeToString makes: whatever fields the model and its graph hold, unknown ones included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.model.file import write_model_file
from optimizer.testing.models import small_cnn


def _every_field() -> onnx.ModelProto:
    """small_cnn with every ModelProto and GraphProto field that a writer could misplace set,
    on both sides of the graph (field 7) and of its initializers (field 5)."""
    model = small_cnn()
    model.producer_name, model.domain, model.model_version = "tests", "ai.tests", 3
    model.doc_string = "a model"
    helper.set_model_props(model, {"author": "tests"})
    model.functions.append(helper.make_function(
        "ai.tests", "Twice", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_opsetid("", 13)]))
    graph = model.graph
    graph.doc_string = "its graph"
    graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5], np.float32), "sparse"),
        numpy_helper.from_array(np.array([2], np.int64), "sparse_indices"), [4]))
    graph.value_info.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1]))
    graph.metadata_props.add(key="stage", value="test")
    graph.quantization_annotation.add(tensor_name="extra")
    return model


def test_the_file_holds_serialize_to_strings_bytes_for_every_field(tmp_path: Path) -> None:
    model = _every_field()
    assert len(model.graph.initializer) > 1

    write_model_file(model, tmp_path / "model.onnx")

    assert (tmp_path / "model.onnx").read_bytes() == model.SerializeToString()


def test_large_tensors_are_written_as_serialize_to_string_writes_them(tmp_path: Path) -> None:
    # Lengths of several varint bytes: a 4 MB tensor, and a graph length past 2**21.
    model = small_cnn()
    rng = np.random.default_rng(0)
    for index in range(3):
        model.graph.initializer.append(numpy_helper.from_array(
            rng.standard_normal(2**20).astype(np.float32), f"unused_{index}"))

    write_model_file(model, tmp_path / "model.onnx")

    assert (tmp_path / "model.onnx").read_bytes() == model.SerializeToString()


def test_unknown_fields_of_the_model_and_graph_are_kept(tmp_path: Path) -> None:
    unknown = bytes([0xA0, 0x1F, 0x01])  # field 500, varint 1: in no onnx version
    model = onnx.ModelProto.FromString(small_cnn().SerializeToString() + unknown)
    graph = onnx.GraphProto.FromString(model.graph.SerializeToString() + unknown)
    model.graph.CopyFrom(graph)
    assert model.SerializeToString().count(unknown) == 2

    write_model_file(model, tmp_path / "model.onnx")

    assert (tmp_path / "model.onnx").read_bytes() == model.SerializeToString()


def test_a_model_without_initializers_is_written_whole(tmp_path: Path) -> None:
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))

    write_model_file(model, tmp_path / "model.onnx")

    assert onnx.load(tmp_path / "model.onnx") == model
