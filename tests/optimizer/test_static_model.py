"""static_model: a model's inputs fixed for a job, refused up front when its dynamic dims at 1
are too small for it, with the input shapes to send."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.errors import InputShapeError
from optimizer.static_model import static_model
from optimizer.testing.models import declared_dims, small_cnn
from optimizer.testing.passes import run_model
from optimizer.testing.shape_models import strided_convnet


def test_dynamic_image_dims_left_at_one_are_refused_with_the_shapes_to_send() -> None:
    model = strided_convnet(["N", 3, "H", "W"])

    with pytest.raises(InputShapeError) as caught:
        static_model(model, None)

    message = str(caught.value)
    assert "dynamic dims 'x' axis 2 (H), 'x' axis 3 (W) are at 1" in message
    assert "cannot run at input shapes x=[1, 3, 1, 1]" in message
    assert 'input_shapes: {"x": [1, 3, 224, 224]}' in message
    assert "--input-shape x=1,3,224,224" in message
    assert caught.value.input_name == "x"


def test_dynamic_image_dims_given_a_size_the_model_runs_at_are_fixed() -> None:
    model = strided_convnet(["N", 3, "H", "W"], seed=4)

    static = static_model(model, {"x": [2, 3, 32, 40]})

    assert static.shapes == {"x": (2, 3, 32, 40)}
    assert declared_dims(static.model.graph.input[0]) == [2, 3, 32, 40]
    feed = {"x": np.random.default_rng(1).standard_normal((2, 3, 32, 40)).astype(np.float32)}
    np.testing.assert_allclose(run_model(static.model, feed)[0], run_model(model, feed)[0],
                               rtol=1e-5, atol=1e-5)


def test_a_minus_one_batch_needs_no_input_shapes() -> None:
    static = static_model(strided_convnet([-1, 3, 48, 192]), None)

    assert static.shapes == {"x": (1, 3, 48, 192)}
    assert declared_dims(static.model.graph.input[0]) == [1, 3, 48, 192]


def test_a_dynamic_batch_alone_is_fixed_at_one() -> None:
    static = static_model(small_cnn(), None)

    assert static.shapes == {"input": (1, 3, 32, 32)}
