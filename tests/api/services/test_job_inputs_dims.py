"""A job on a model whose input declares dim_value -1 (as Paddle2ONNX writes a dynamic batch)."""

from __future__ import annotations

from api.services.job_inputs import job_input_shapes, job_profiles
from optimizer.tensor_specs import TensorSpec

# As the model's summary is stored: the -1 kept from the file by summaries written before
# -1 was read as dynamic.
STORED = [TensorSpec.from_dict({"name": "x", "dtype": "float32", "shape": [-1, 3, 48, 192]})]


def test_a_job_without_input_shapes_runs_the_minus_one_batch_at_one() -> None:
    assert job_input_shapes(STORED, None, None) == {"x": (1, 3, 48, 192)}


def test_a_job_may_set_the_minus_one_batch() -> None:
    assert job_input_shapes(STORED, {"x": [8, 3, 48, 192]}, None) == {"x": (8, 3, 48, 192)}


def test_a_job_may_profile_the_minus_one_batch() -> None:
    profiles = job_profiles(STORED, {"x": {"min": [1, 3, 48, 192], "opt": [4, 3, 48, 192],
                                            "max": [8, 3, 48, 192]}})

    assert job_input_shapes(STORED, None, None, profiles) == {"x": (4, 3, 48, 192)}
