"""summarize_model and dtype_name: plain, JSON-able descriptions of a model's inputs and outputs."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from optimizer.model.tensor_specs import ModelSummary, TensorSpec, dtype_name, summarize_model
from optimizer.testing import models


def test_summarize_model_reports_version_producer_inputs_and_outputs():
    summary = summarize_model(models.small_cnn())

    assert summary == ModelSummary(
        ir_version=models.IR_VERSION,
        opset=models.OPSET,
        producer="fuseforge-tests 0.1",
        inputs=(TensorSpec("input", "float32", ("N", 3, 32, 32)),),
        outputs=(TensorSpec("logits", "float32", ("N", 10)),),
    )


def test_summarize_model_leaves_out_initializers_listed_as_inputs():
    model = models.mlp()
    # Older exporters (IR < 4) list every weight as a graph input too.
    model.graph.input.append(helper.make_tensor_value_info("fc1.w", TensorProto.FLOAT, [16, 32]))

    assert [spec.name for spec in summarize_model(model).inputs] == ["input"]


def test_summarize_model_reads_opset_from_the_ai_onnx_domain_alias():
    model = models.mlp()
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("com.microsoft", 1),
                               helper.make_opsetid("ai.onnx", 13)])

    assert summarize_model(model).opset == 13


def test_summarize_model_marks_a_dim_without_value_or_name_unknown():
    model = models.mlp()
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()

    assert summarize_model(model).inputs[0].shape == (None, 16)


@pytest.mark.parametrize(("elem_type", "name"), [
    (TensorProto.FLOAT, "float32"),
    (TensorProto.FLOAT16, "float16"),
    (TensorProto.BFLOAT16, "bfloat16"),
    (TensorProto.INT64, "int64"),
    (TensorProto.BOOL, "bool"),
    (TensorProto.STRING, "string"),
    (TensorProto.UNDEFINED, "undefined"),
    (999, "elem_type_999"),
])
def test_dtype_name_maps_onnx_types_to_numpy_names_without_raising(elem_type, name):
    assert dtype_name(elem_type) == name


def test_tensor_spec_survives_a_trip_through_json():
    spec = TensorSpec("input", "float32", ("N", 3, None, 32))

    assert TensorSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
