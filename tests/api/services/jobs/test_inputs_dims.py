"""A job on a model whose input declares dim_value -1 (as Paddle2ONNX writes a dynamic batch)."""

from __future__ import annotations

from optimizer.job_inputs import resolve_job_inputs
from optimizer.model.tensor_specs import TensorSpec

# As the model's summary is stored: the -1 kept from the file by summaries written before
# -1 was read as dynamic.
STORED = [TensorSpec.from_dict({"name": "x", "dtype": "float32", "shape": [-1, 3, 48, 192]})]


def test_a_job_without_input_shapes_runs_the_minus_one_batch_at_one() -> None:
    assert resolve_job_inputs(STORED).shapes == {"x": (1, 3, 48, 192)}


def test_a_job_may_set_the_minus_one_batch() -> None:
    assert resolve_job_inputs(STORED, input_shapes={"x": [8, 3, 48, 192]}).shapes == {
        "x": (8, 3, 48, 192)}


def test_a_job_may_profile_the_minus_one_batch() -> None:
    resolved = resolve_job_inputs(STORED, profiles={"x": {
        "min": [1, 3, 48, 192], "opt": [4, 3, 48, 192], "max": [8, 3, 48, 192]}})

    assert resolved.shapes == {"x": (4, 3, 48, 192)}
