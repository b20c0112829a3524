"""optimizer.job_inputs: one resolution of a job's inputs, each refusal tagged with its field."""

import pytest

from optimizer.errors import DatasetError, InputRangeError, InputShapeError
from optimizer.job_inputs import DatasetArrays, resolve_job_inputs
from optimizer.model.tensor_specs import TensorSpec

IMAGE = TensorSpec("image", "float32", ("N", 3, 32, 32))
TOKENS = TensorSpec("tokens", "int64", ("B", "seq"))
PROFILE = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [8, 3, 32, 32]}


def test_a_profiled_input_without_a_shape_runs_at_its_opt():
    resolved = resolve_job_inputs([IMAGE], profiles={"image": PROFILE})

    assert resolved.shapes == {"image": (4, 3, 32, 32)}
    assert resolved.profiles["image"].max == (8, 3, 32, 32)
    every = resolved.profile_of_every_input([IMAGE])
    assert every["image"] == resolved.profiles["image"]


def test_an_input_without_a_profile_gets_a_static_one_at_its_shape():
    resolved = resolve_job_inputs([IMAGE, TOKENS], input_shapes={"tokens": [1, 7]},
                                  profiles={"image": PROFILE})

    assert resolved.profile_of_every_input([IMAGE, TOKENS])["tokens"].is_static


def test_the_datasets_sample_shape_sets_the_input_shape():
    dataset = DatasetArrays(label="dataset d ('val')", samples=5,
                            arrays=(TensorSpec("image", "float32", (2, 3, 32, 32)),))

    assert resolve_job_inputs([IMAGE], dataset=dataset).shapes == {"image": (2, 3, 32, 32)}


@pytest.mark.parametrize(("options", "error", "field"), [
    ({"input_shapes": {"image": [1, 4, 32, 32]}}, InputShapeError, "input_shapes.image"),
    ({"input_shapes": {"nope": [1]}}, InputShapeError, "input_shapes.nope"),
    ({"profiles": {"image": {**PROFILE, "opt": [9, 3, 32, 32]}}}, InputShapeError, "profiles.image"),
    ({"input_shapes": {"image": [16, 3, 32, 32]}, "profiles": {"image": PROFILE}},
     InputShapeError, "profiles.image"),
    ({"input_ranges": {"tokens": (0.5, 3.0)}}, InputRangeError, "input_ranges.tokens"),
    ({"input_ranges": {"image": (2.0, 1.0)}}, InputRangeError, "input_ranges.image"),
    ({"dataset": DatasetArrays(label="dataset d ('val')", samples=2,
                               arrays=(TensorSpec("image", "float16", (1, 3, 32, 32)),))},
     DatasetError, "dataset_id"),
])
def test_each_refusal_names_its_field_first(options, error, field):
    with pytest.raises(error) as refused:
        resolve_job_inputs([IMAGE, TOKENS], **options)

    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")
