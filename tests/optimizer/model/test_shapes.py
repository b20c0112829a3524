"""resolve_input_shapes and fix_input_shapes: concrete input shapes, and models fixed to them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.errors import InputShapeError, InvalidModelError
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.testing import models

IMAGE = TensorSpec("image", "float32", ("N", 3, None, 224))
MASK = TensorSpec("mask", "bool", (1, "seq"))


def test_resolve_input_shapes_defaults_dynamic_dims_to_one_and_keeps_fixed_dims():
    assert resolve_input_shapes([IMAGE, MASK], None) == {
        "image": (1, 3, 1, 224), "mask": (1, 1)}


def test_resolve_input_shapes_uses_requested_dims_and_defaults_the_rest():
    shapes = resolve_input_shapes([IMAGE, MASK], {"image": [8, 3, 160, 224]})

    assert shapes == {"image": (8, 3, 160, 224), "mask": (1, 1)}


def test_resolve_input_shapes_accepts_numpy_integers():
    shapes = resolve_input_shapes([MASK], {"mask": np.array([1, 128])})

    assert shapes == {"mask": (1, 128)} and all(type(dim) is int for dim in shapes["mask"])


def test_resolve_input_shapes_works_on_specs_rebuilt_from_json():
    stored = json.dumps([IMAGE.to_dict()])
    specs = [TensorSpec.from_dict(data) for data in json.loads(stored)]

    assert resolve_input_shapes(specs, {"image": [2, 3, 64, 224]}) == {"image": (2, 3, 64, 224)}


def test_resolve_input_shapes_rejects_an_unknown_input_listing_the_real_ones():
    with pytest.raises(InputShapeError, match="no input of that name; its inputs are: "
                                              "'image', 'mask'") as caught:
        resolve_input_shapes([IMAGE, MASK], {"images": [1, 3, 224, 224]})

    assert caught.value.input_name == "images"


def test_resolve_input_shapes_rejects_a_rank_mismatch():
    with pytest.raises(InputShapeError, match=r"'image' has rank 4 .* has 3 dims") as caught:
        resolve_input_shapes([IMAGE], {"image": [3, 224, 224]})

    assert caught.value.input_name == "image"


@pytest.mark.parametrize("dim", [0, -1, 1.5, "8", True, None])
def test_resolve_input_shapes_rejects_a_dim_that_is_not_a_positive_integer(dim):
    with pytest.raises(InputShapeError, match=f"axis 0: requested dim {dim!r} is not a positive"):
        resolve_input_shapes([IMAGE], {"image": [dim, 3, 224, 224]})


def test_resolve_input_shapes_rejects_a_shape_that_is_not_a_list():
    with pytest.raises(InputShapeError, match="'1,3' is not a list of dims"):
        resolve_input_shapes([MASK], {"mask": "1,3"})


def test_resolve_input_shapes_rejects_a_dim_that_contradicts_a_fixed_one():
    with pytest.raises(InputShapeError,
                       match=r"'image' axis 1 is fixed at 3 in the model .* but 4 was requested"):
        resolve_input_shapes([IMAGE], {"image": [1, 4, 224, 224]})


def test_fix_input_shapes_makes_a_dynamic_batch_static_throughout():
    fixed = fix_input_shapes(models.small_cnn(), {"input": [4, 3, 32, 32]})

    summary = summarize_model(fixed)
    assert summary.inputs[0].shape == (4, 3, 32, 32)
    assert summary.outputs[0].shape == (4, 10)
    for value in fixed.graph.value_info:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_value == 4, value.name
    onnx.checker.check_model(fixed, full_check=True)


def test_fix_input_shapes_keeps_an_output_inference_cannot_shape_valid():
    # Paddle2ONNX's pattern: a Reshape whose target is computed (here sliced at an end that
    # inference cannot evaluate), so the output's rank is unknown to shape inference.
    nodes = [helper.make_node("Shape", ["x"], ["dims"]),
             helper.make_node("ReduceMax", ["two"], ["end_f"], keepdims=1),
             helper.make_node("Cast", ["end_f"], ["end"], to=TensorProto.INT64),
             helper.make_node("Slice", ["dims", "one", "end"], ["tail"]),
             helper.make_node("Concat", ["minus_one", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(
        nodes, "computed_reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                  ["N", 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 2])],
        [helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0]),
         helper.make_tensor("one", TensorProto.INT64, [1], [1]),
         helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    fixed = fix_input_shapes(model, {"x": [4, 2, 3]})

    onnx.checker.check_model(fixed, full_check=True)
    # The declared rank, every dim symbolic: the exporter's sizes were for other inputs.
    assert summarize_model(fixed).outputs[0].shape == ("rows", "y_dim1")


def test_fix_input_shapes_defaults_inputs_it_is_not_given():
    fixed = fix_input_shapes(models.mlp(), {})

    assert summarize_model(fixed).inputs[0].shape == (1, 16)


def test_fix_input_shapes_leaves_the_original_model_unchanged():
    model = models.small_cnn()

    fix_input_shapes(model, {"input": [2, 3, 32, 32]})

    assert summarize_model(model).inputs[0].shape == ("N", 3, 32, 32)


def test_fix_input_shapes_drops_intermediate_shapes_recorded_for_another_batch():
    model = models.mlp()
    # An exporter traced at batch 1 can leave that batch baked into value_info.
    model.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 32]))

    fixed = fix_input_shapes(model, {"input": [8, 16]})

    assert summarize_model(fixed).outputs[0].shape == (8, 4)


def test_fix_input_shapes_reports_a_shape_inference_failure_as_an_invalid_model():
    weights = helper.make_tensor("w", TensorProto.FLOAT, [16, 8], np.ones(128, np.float32))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["output"])], "matmul",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", "K"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 8])],
        initializer=[weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    # K = 5 cannot multiply a 16 x 8 weight.
    with pytest.raises(InvalidModelError, match=r"shape inference failed .* input=\[2, 5\]"):
        fix_input_shapes(model, {"input": [2, 5]})


def test_fix_input_shapes_replaces_a_wrong_declared_output_shape_with_the_inferred_one():
    model = models.small_cnn()
    dims = model.graph.output[0].type.tensor_type.shape.dim
    dims[1].dim_value = 999  # the graph really produces 10 classes

    fixed = fix_input_shapes(model, {"input": [2, 3, 32, 32]})

    out_dims = fixed.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in out_dims] == [2, 10]
