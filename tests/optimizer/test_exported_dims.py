"""Dims exporters write as dim_value -1 (Paddle2ONNX's dynamic batch) or 0 are dynamic
everywhere: summaries, shapes, fixed models and TensorRT profiles."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from optimizer.backends.tensorrt.profiles import resolve_profiles
from optimizer.errors import InputShapeError
from optimizer.model.shapes import fix_input_shapes, fix_input_shapes_except, resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.testing.models import declared_dims
from optimizer.testing.passes import run_model
from optimizer.testing.shape_models import strided_convnet


@pytest.mark.parametrize("declared", [-1, 0, -7])
def test_a_non_positive_declared_dim_is_dynamic(declared: int) -> None:
    spec = summarize_model(strided_convnet([declared, 3, 48, 192])).inputs[0]

    assert spec.shape == (None, 3, 48, 192)


def test_a_spec_stored_with_minus_one_reads_back_dynamic() -> None:
    stored = {"name": "x", "dtype": "float32", "shape": [-1, 3, 48, 192]}

    assert TensorSpec.from_dict(stored).shape == (None, 3, 48, 192)


def test_minus_one_batch_defaults_to_one_and_takes_any_requested_size() -> None:
    inputs = summarize_model(strided_convnet([-1, 3, 48, 192])).inputs

    assert resolve_input_shapes(inputs, None) == {"x": (1, 3, 48, 192)}
    assert resolve_input_shapes(inputs, {"x": [1, 3, 48, 192]}) == {"x": (1, 3, 48, 192)}
    assert resolve_input_shapes(inputs, {"x": [4, 3, 48, 192]}) == {"x": (4, 3, 48, 192)}


def test_requesting_minus_one_asks_for_a_size_to_run_at() -> None:
    inputs = summarize_model(strided_convnet([-1, 3, 48, 192])).inputs

    with pytest.raises(InputShapeError, match=r"axis 0: requested dim -1 is not a positive "
                                              r"integer; give the size to run at.*\[1, 3, 48, 192\]"):
        resolve_input_shapes(inputs, {"x": [-1, 3, 48, 192]})


def test_a_minus_one_model_fixed_at_a_batch_runs_there() -> None:
    model = strided_convnet([-1, 3, 48, 192], seed=3)

    fixed = fix_input_shapes(model, {"x": [2, 3, 48, 192]})

    assert declared_dims(fixed.graph.input[0]) == [2, 3, 48, 192]
    feed = {"x": np.random.default_rng(0).standard_normal((2, 3, 48, 192)).astype(np.float32)}
    np.testing.assert_allclose(run_model(fixed, feed)[0], run_model(model, feed)[0], rtol=1e-5,
                               atol=1e-5)
    onnx.checker.check_model(fixed, full_check=True)


def test_a_minus_one_batch_can_stay_dynamic_for_a_profile() -> None:
    model = strided_convnet([-1, 3, 48, 192])
    inputs = summarize_model(model).inputs

    profiled = fix_input_shapes_except(model, {"x": [4, 3, 48, 192]}, {"x": [0]})
    profiles = resolve_profiles(inputs, {"x": {"min": [1, 3, 48, 192], "opt": [4, 3, 48, 192],
                                               "max": [8, 3, 48, 192]}})

    assert declared_dims(profiled.graph.input[0]) == ["x_dim0", 3, 48, 192]
    assert profiles["x"].max == (8, 3, 48, 192)
