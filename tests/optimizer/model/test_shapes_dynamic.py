"""fix_input_shapes_except: inputs fixed except the axes an optimization profile lets vary."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from optimizer.errors import InputShapeError
from optimizer.model.shapes import fix_input_shapes_except
from optimizer.model.tensor_specs import summarize_model
from optimizer.testing import models
from optimizer.testing.passes import run_model


def _tokens(ids_dims: list[int | str | None], mask_dims: list[int | str | None]) -> onnx.ModelProto:
    return models.token_embedding(ids_dims, mask_dims, [None, None, 4], seed=7)


_dims = models.declared_dims


def test_a_dynamic_batch_keeps_the_models_name_through_to_the_output_and_runs_at_any_batch():
    model = models.small_cnn()

    dynamic = fix_input_shapes_except(model, {"input": [4, 3, 32, 32]}, {"input": [0]})

    assert _dims(dynamic.graph.input[0]) == ["N", 3, 32, 32]
    assert _dims(dynamic.graph.output[0]) == ["N", 10]
    onnx.checker.check_model(dynamic, full_check=True)
    rng = np.random.default_rng(0)
    for batch in (1, 4, 7):
        feed = {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
        np.testing.assert_allclose(run_model(dynamic, feed)[0], run_model(model, feed)[0],
                                   rtol=1e-6, atol=1e-6)


def test_axes_not_left_dynamic_are_fixed_at_the_given_shape():
    model = _tokens(["batch", "seq"], ["batch", "seq"])

    dynamic = fix_input_shapes_except(model, {"ids": [2, 64], "mask": [2, 64]},
                                      {"ids": [0], "mask": [0]})

    assert [_dims(v) for v in dynamic.graph.input] == [["batch", 64], ["batch", 64]]
    assert _dims(dynamic.graph.output[0]) == ["batch", 64, 4]


def test_inputs_sharing_a_dim_stay_linked_through_shape_inference():
    model = _tokens(["batch", "seq"], ["batch", "seq"])

    dynamic = fix_input_shapes_except(model, {"ids": [2, 64], "mask": [2, 64]},
                                      {"ids": [0, 1], "mask": [1, 0]})

    assert [_dims(v) for v in dynamic.graph.input] == [["batch", "seq"], ["batch", "seq"]]
    # One symbol per dim all the way: Mul(embedded, mask3) broadcasts to the same dims.
    assert _dims(dynamic.graph.output[0]) == ["batch", "seq", 4]
    inferred = {v.name: _dims(v) for v in dynamic.graph.value_info}
    assert inferred["embedded"] == ["batch", "seq", 4]
    assert inferred["mask3"] == ["batch", "seq", 1]


def test_an_unnamed_dynamic_axis_gets_a_name_of_its_input_and_axis():
    model = _tokens([None, None], [None, None])

    dynamic = fix_input_shapes_except(model, {"ids": [2, 64], "mask": [2, 64]},
                                      {"ids": [0], "mask": [0]})

    assert [_dims(v) for v in dynamic.graph.input] == [["ids_dim0", 64], ["mask_dim0", 64]]


def test_a_generated_name_never_takes_a_name_the_model_already_uses():
    model = _tokens([None, "ids_dim0"], [None, "ids_dim0"])

    dynamic = fix_input_shapes_except(model, {"ids": [2, 8], "mask": [2, 8]},
                                      {"ids": [0, 1], "mask": [0, 1]})

    assert _dims(dynamic.graph.input[0]) == ["ids_dim0_2", "ids_dim0"]
    assert _dims(dynamic.graph.input[1]) == ["mask_dim0", "ids_dim0"]


def test_the_original_model_is_left_unchanged():
    model = models.small_cnn()
    before = model.SerializeToString()

    fix_input_shapes_except(model, {"input": [4, 3, 32, 32]}, {"input": [0]})

    assert model.SerializeToString() == before


def test_a_dim_shared_by_two_inputs_cannot_be_dynamic_in_one_and_fixed_in_the_other():
    model = _tokens(["batch", "seq"], ["batch", "seq"])

    with pytest.raises(InputShapeError, match=(
            r"Dim 'batch' is shared by input 'ids' axis 0, left dynamic, and input 'mask' axis "
            r"0, fixed")) as caught:
        fix_input_shapes_except(model, {"ids": [2, 64], "mask": [2, 64]}, {"ids": [0]})

    assert caught.value.input_name == "mask"


@pytest.mark.parametrize(
    ("dynamic_axes", "message"),
    [
        ({"input": [1]}, r"'input' axis 1 is fixed at 3 in the model .* cannot be left dynamic"),
        ({"input": [4]}, r"'input' has rank 4 .* axis 4 cannot be left dynamic"),
        ({"input": [-1]}, r"axis -1 cannot be left dynamic; give axes 0 to 3"),
        ({"image": [0]}, r"no input of that name; its inputs are: 'input'"),
    ],
    ids=["fixed-axis", "past-the-rank", "negative-axis", "unknown-input"],
)
def test_axes_that_cannot_be_left_dynamic_are_refused(dynamic_axes, message):
    with pytest.raises(InputShapeError, match=message):
        fix_input_shapes_except(models.small_cnn(), {"input": [4, 3, 32, 32]}, dynamic_axes)


def test_a_summary_of_the_result_shows_the_dynamic_axes_as_named_dims():
    dynamic = fix_input_shapes_except(models.mlp(), {"input": [8, 16]}, {"input": [0]})

    summary = summarize_model(dynamic)
    assert summary.inputs[0].shape == ("N", 16)
    assert summary.outputs[0].shape == ("N", 4)
