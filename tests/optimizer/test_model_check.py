"""check_model_file: every way an upload can fail (the hostile corpus included), and that it never
reads beyond the upload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto, helper

from optimizer.errors import (
    InternalError,
    InvalidModelError,
    ModelLimitError,
    OptimizerError,
    UnsupportedModelError,
)
from optimizer.model.limits import ModelLimits
from optimizer.model.tensor_specs import TensorSpec
from optimizer.model_check import check_model_file, load_checked_model
from optimizer.testing import models
from tests.support import corrupted_models, hostile_models


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _with_external_data(tmp_path: Path, location: str) -> Path:
    """small_cnn saved with its weights in a separate file named by `location`.

    onnx.save refuses locations with "..", so the model is saved with a plain name and the
    recorded location rewritten afterwards, as a hostile upload would be.
    """
    upload_dir = tmp_path / "upload"
    upload_dir.mkdir()
    path = upload_dir / "model.onnx"
    onnx.save(models.small_cnn(), path, save_as_external_data=True, location="weights.bin",
              size_threshold=0)
    model = onnx.load(path, load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    path.write_bytes(model.SerializeToString())
    return path


def test_check_model_file_accepts_small_cnn_and_summarizes_it(cnn_path):
    summary = check_model_file(cnn_path)

    assert summary.opset == models.OPSET
    assert summary.inputs == (TensorSpec("input", "float32", ("N", 3, 32, 32)),)
    assert summary.outputs == (TensorSpec("logits", "float32", ("N", 10)),)


def test_check_model_file_rejects_empty_file(tmp_path):
    with pytest.raises(InvalidModelError, match="the file is empty"):
        check_model_file(_write(tmp_path / "model.onnx", b""))


def test_check_model_file_rejects_truncated_protobuf(tmp_path):
    data = models.model_bytes(models.small_cnn())

    with pytest.raises(InvalidModelError, match="not an ONNX protobuf"):
        check_model_file(_write(tmp_path / "model.onnx", data[: len(data) // 2]))


def test_check_model_file_rejects_random_bytes(tmp_path):
    noise = np.random.default_rng(0).bytes(4096)

    with pytest.raises(InvalidModelError, match="not an ONNX protobuf"):
        check_model_file(_write(tmp_path / "model.onnx", noise))


@pytest.mark.parametrize(("data", "missing"), [
    (b"\x08\x07", "no opset_import, no graph"),  # field 1 (ir_version) = 7, nothing else
    (b"\x12\x03abc", "no ir_version, no opset_import, no graph"),  # producer_name only
])
def test_check_model_file_rejects_bytes_that_parse_but_are_not_a_model(tmp_path, data, missing):
    with pytest.raises(InvalidModelError, match=f"is not an ONNX model: it has {missing}"):
        check_model_file(_write(tmp_path / "model.onnx", data))


def test_check_model_file_includes_the_checker_message(tmp_path):
    model = models.small_cnn()
    model.graph.node[0].op_type = "Cnov"

    with pytest.raises(InvalidModelError, match="fails the ONNX checker: .*Cnov"):
        check_model_file(_write(tmp_path / "model.onnx", models.model_bytes(model)))


def test_check_model_file_parses_protobuf_whatever_the_extension(tmp_path):
    # onnx.load would pick its JSON parser for ".json"; uploads are stored under any name.
    path = _write(tmp_path / "upload.json", models.model_bytes(models.mlp()))

    assert check_model_file(path).outputs[0].name == "output"


@pytest.mark.parametrize("location", ["../x.bin", "../../etc/passwd", "/etc/passwd",
                                      "sub/../../x.bin", "C:\\weights.bin"])
def test_check_model_file_refuses_external_data_outside_the_upload(tmp_path, location,
                                                                   opened_files):
    path = _with_external_data(tmp_path, location)
    (tmp_path / "x.bin").write_bytes(b"\0" * 4096)
    opened_files.clear()

    with pytest.raises(UnsupportedModelError, match="refers outside the upload") as caught:
        check_model_file(path)

    assert "'conv1.w'" in str(caught.value) and repr(location) in str(caught.value)
    assert set(opened_files) == {str(path.resolve())}  # the upload alone (scanned, then read)


def test_check_model_file_refuses_external_data_inside_the_upload_folder(tmp_path,
                                                                         opened_files):
    path = _with_external_data(tmp_path, "weights.bin")
    opened_files.clear()

    with pytest.raises(UnsupportedModelError, match="save_as_external_data=False") as caught:
        check_model_file(path)

    assert "'weights.bin'" in str(caught.value)
    assert "external data files are not available" in str(caught.value)
    assert set(opened_files) == {str(path.resolve())}  # the upload alone (scanned, then read)


@pytest.mark.parametrize(("key", "value"), [("offset", "-1"), ("length", "-1"),
                                            ("offset", "not-a-number"), ("length", "9" * 400)])
def test_check_model_file_refuses_external_data_with_a_malformed_entry(tmp_path, key, value):
    # onnx's ExternalDataInfo raises ValueError for these; the upload must be refused as a
    # model fault (external data is refused whatever its entries say), never crash the check.
    path = _with_external_data(tmp_path, "weights.bin")
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer[0].external_data.add(key=key, value=value)
    path.write_bytes(model.SerializeToString())

    with pytest.raises(UnsupportedModelError, match="external file 'weights.bin'"):
        check_model_file(path)


def test_check_model_file_finds_external_data_in_a_constant_node(tmp_path):
    value = helper.make_tensor("c", TensorProto.FLOAT, [4], [0.0] * 4)
    value.ClearField("float_data")
    value.data_location = TensorProto.EXTERNAL
    value.external_data.add(key="location", value="../secret.bin")
    model = models.mlp()
    model.graph.node.append(helper.make_node("Constant", [], ["c"], value=value))

    with pytest.raises(UnsupportedModelError, match="tensor 'c' .*refers outside the upload"):
        check_model_file(_write(tmp_path / "model.onnx", models.model_bytes(model)))


def test_check_model_file_rejects_an_input_of_unknown_rank(tmp_path):
    model = models.mlp()
    model.graph.input[0].type.tensor_type.ClearField("shape")

    # The ONNX checker requires a shape (dims may be symbolic) on every graph input.
    with pytest.raises(InvalidModelError, match="fails the ONNX checker: .*'shape'"):
        check_model_file(_write(tmp_path / "model.onnx", models.model_bytes(model)))


def test_check_model_file_refuses_a_sequence_input(tmp_path):
    sequence_type = helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["seq"], ["length"])], "seq",
        [helper.make_value_info("seq", sequence_type)],
        [helper.make_tensor_value_info("length", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)])
    model.ir_version = models.IR_VERSION

    with pytest.raises(UnsupportedModelError, match="input 'seq' is a sequence value"):
        check_model_file(_write(tmp_path / "model.onnx", models.model_bytes(model)))


def test_check_model_file_blames_us_for_a_missing_file(tmp_path):
    with pytest.raises(InternalError, match="does not exist"):
        check_model_file(tmp_path / "never-stored.onnx")


def test_check_model_file_rejects_a_graph_without_outputs(tmp_path):
    model = helper.make_model(helper.make_graph([], "empty", [], []),
                              opset_imports=[helper.make_opsetid("", 17)])

    with pytest.raises(InvalidModelError, match="declares no outputs"):
        check_model_file(_write(tmp_path / "model.onnx", model.SerializeToString()))


@pytest.mark.parametrize(("data", "expected"),
                         [pytest.param(data, expected, id=name)
                          for name, data, expected in hostile_models.HOSTILE_UPLOADS])
def test_check_model_file_refuses_each_hostile_upload(tmp_path, data, expected):
    with pytest.raises((InvalidModelError, UnsupportedModelError)) as caught:
        check_model_file(_write(tmp_path / "model.onnx", data))

    assert expected in str(caught.value)
    assert str(caught.value).startswith("Model file 'model.onnx'")


def test_check_model_file_accepts_control_flow_nested_to_the_default_limit(tmp_path):
    depth = ModelLimits().max_subgraph_depth

    summary = check_model_file(_write(tmp_path / "model.onnx", hostile_models.nested_if(depth)))

    assert summary.outputs[0].name == "y0"


def test_check_model_file_applies_the_limits_it_is_given(tmp_path):
    path = _write(tmp_path / "model.onnx", models.model_bytes(models.small_cnn()))

    with pytest.raises(ModelLimitError, match="has rank 4; the limit is 3") as caught:
        check_model_file(path, ModelLimits(max_rank=3))

    assert caught.value.limit == "max_rank"


@pytest.mark.parametrize("elem_type", [9999, TensorProto.UNDEFINED])
def test_check_model_file_refuses_unknown_element_types(tmp_path, elem_type):
    # The ONNX checker passes all three; every runtime refuses them.
    for where in ("input", "output", "initializer"):
        model = models.mlp()
        if where == "initializer":
            model.graph.initializer[0].data_type = elem_type
        else:
            getattr(model.graph, where)[0].type.tensor_type.elem_type = elem_type

        with pytest.raises(InvalidModelError, match=f"has element type {elem_type}, which is not"):
            check_model_file(_write(tmp_path / "model.onnx", models.model_bytes(model)))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=corrupted_models.seeds, edits=corrupted_models.edits)
def test_check_model_file_refuses_corrupted_bytes_only_with_model_errors(tmp_path, seed, edits):
    # Whatever bytes arrive, the check either accepts them or raises an OptimizerError with a
    # message (a 422 at the API), never another exception (a 500).
    path = _write(tmp_path / "model.onnx", corrupted_models.corrupted(seed, edits))
    try:
        check_model_file(path)
    except OptimizerError as err:
        assert str(err)


def test_the_checks_errors_survive_pickling_with_what_they_carry():
    # The API runs the check in a child process, which sends its error back pickled.
    import pickle

    from optimizer.errors import InputShapeError, ModelLimitError

    limit = pickle.loads(pickle.dumps(ModelLimitError("too deep", limit="max_rank")))
    shape = pickle.loads(pickle.dumps(InputShapeError("bad", input_name="x")))
    assert (str(limit), limit.limit) == ("too deep", "max_rank")
    assert (str(shape), shape.input_name) == ("bad", "x")


def _mul_by_constant(ir_version: int, *, weight_in_inputs: bool) -> onnx.ModelProto:
    # The shape of onnxruntime's sample mul_1.onnx: IR 3, its weight an initializer only.
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])
    weight = onnx.numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["Y"])], "mul",
                              [x, w] if weight_in_inputs else [x], [y], [weight])
    return helper.make_model(graph, ir_version=ir_version,
                             opset_imports=[helper.make_opsetid("", 7)])


def test_an_ir3_model_with_constants_outside_its_inputs_is_accepted_as_ir4(tmp_path):
    path = tmp_path / "mul.onnx"
    path.write_bytes(_mul_by_constant(3, weight_in_inputs=False).SerializeToString())
    with pytest.raises(onnx.checker.ValidationError, match="not in graph input"):
        onnx.checker.check_model(str(path))  # what refused it before
    model, summary = load_checked_model(path)
    assert model.ir_version == 4
    assert [spec.name for spec in summary.inputs] == ["X"]


def test_an_ir3_model_that_lists_its_constants_as_inputs_keeps_its_ir_version(tmp_path):
    path = tmp_path / "mul.onnx"
    path.write_bytes(_mul_by_constant(3, weight_in_inputs=True).SerializeToString())
    assert load_checked_model(path)[0].ir_version == 3
