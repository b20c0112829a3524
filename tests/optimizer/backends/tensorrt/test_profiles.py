"""resolve_profiles: job config min/opt/max per input -> validated OptimizationProfileSpecs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optimizer.backends.tensorrt.profiles import (
    OptimizationProfileSpec,
    profiles_from_dict,
    profiles_to_dict,
    resolve_profiles,
)
from optimizer.errors import InputShapeError
from optimizer.model.tensor_specs import TensorSpec

IMAGE = TensorSpec("input", "float32", ("N", 3, 32, 32))
TOKENS = TensorSpec("input_ids", "int64", ("batch", "seq"))
MASK = TensorSpec("attention_mask", "int64", ("batch", "seq"))
STATIC = TensorSpec("x", "float32", (2, 8))

RANGE = {"min": [1, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]}


def test_profile_from_job_config_keeps_min_opt_max():
    profiles = resolve_profiles([IMAGE], {"input": RANGE})

    assert profiles == {"input": OptimizationProfileSpec((1, 3, 32, 32), (8, 3, 32, 32),
                                                         (32, 3, 32, 32))}
    assert not profiles["input"].is_static


def test_inputs_without_a_profile_get_the_models_static_shape():
    assert resolve_profiles([STATIC], None) == {"x": OptimizationProfileSpec.static((2, 8))}


def test_dynamic_input_without_a_profile_is_built_for_its_input_shape_or_ones():
    from_shapes = resolve_profiles([TOKENS, MASK], {"input_ids": {
        "min": [1, 16], "opt": [4, 128], "max": [8, 512]}},
        input_shapes={"attention_mask": [4, 128]})
    defaults = resolve_profiles([TOKENS], None)

    assert from_shapes["attention_mask"] == OptimizationProfileSpec.static((4, 128))
    assert from_shapes["input_ids"].max == (8, 512)
    assert defaults["input_ids"] == OptimizationProfileSpec.static((1, 1))


def test_profiles_follow_the_models_input_order():
    profiles = resolve_profiles([TOKENS, MASK], {"attention_mask": [2, 4], "input_ids": [2, 4]})

    assert list(profiles) == ["input_ids", "attention_mask"]


def test_a_single_shape_is_a_static_profile():
    profile = resolve_profiles([IMAGE], {"input": (4, 3, 32, 32)})["input"]

    assert profile.is_static and profile.opt == (4, 3, 32, 32)


def test_profile_round_trips_through_json():
    profiles = resolve_profiles([IMAGE], {"input": RANGE})

    assert profiles_from_dict(profiles_to_dict(profiles)) == profiles
    assert profiles_to_dict(profiles) == {"input": RANGE}


def test_unknown_input_name_is_refused_naming_the_inputs():
    with pytest.raises(InputShapeError, match=r"'images'.*inputs are: 'input'") as info:
        resolve_profiles([IMAGE], {"images": RANGE})
    assert info.value.input_name == "images"


@pytest.mark.parametrize(("profile", "message"), [
    ({"min": [1, 3, 32, 32], "opt": [8, 3, 32, 32]}, "missing max"),
    ({**RANGE, "best": [4, 3, 32, 32]}, "unknown key.*'best'"),
    ({"min": [1, 3, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]}, "profile min: .*rank 4"),
    ({"min": [0, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]},
     "dim 0 is not a positive integer"),
    ({"min": [1.5, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]},
     "not a positive integer"),
    ({"min": [True, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]},
     "not a positive integer"),
    ({"min": "1,3,32,32", "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]}, "not a list of dims"),
    ({"min": [1, 3, 32, 32], "opt": [8, 3, 64, 64], "max": [32, 3, 64, 64]},
     "profile opt: .*axis 2 is fixed at 32"),
    ({"min": [8, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [32, 3, 32, 32]},
     "min 8, opt 4, max 32"),
    ({"min": [1, 3, 32, 32], "opt": [64, 3, 32, 32], "max": [32, 3, 32, 32]},
     "min 1, opt 64, max 32"),
    ("1x3x32x32", "not a list of dims"),
])
def test_invalid_profiles_are_refused_with_the_reason(profile, message):
    with pytest.raises(InputShapeError, match=message) as info:
        resolve_profiles([IMAGE], {"input": profile})
    assert info.value.input_name == "input"


def test_input_shape_outside_its_profile_is_refused():
    with pytest.raises(InputShapeError, match=r"\[64, 3, 32, 32\] lies outside"):
        resolve_profiles([IMAGE], {"input": RANGE}, input_shapes={"input": [64, 3, 32, 32]})


def test_input_shapes_are_validated_even_for_profiled_inputs():
    with pytest.raises(InputShapeError, match="fixed at 3"):
        resolve_profiles([IMAGE], {"input": RANGE}, input_shapes={"input": [8, 4, 32, 32]})


def test_contains_checks_rank_and_every_axis():
    profile = OptimizationProfileSpec((1, 4), (2, 8), (4, 16))

    assert profile.contains((1, 16)) and profile.contains([4, 4])
    assert not profile.contains((5, 8)) and not profile.contains((2,))


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64)),
                min_size=1, max_size=4))
def test_any_ordered_range_on_dynamic_axes_is_accepted_and_kept(axes):
    spec = TensorSpec("x", "float32", tuple(f"d{i}" for i in range(len(axes))))
    ordered = [sorted(axis) for axis in axes]
    config = {key: [axis[index] for axis in ordered]
              for index, key in enumerate(("min", "opt", "max"))}

    profile = resolve_profiles([spec], {"x": config})["x"]

    assert profile.to_dict() == config
    assert profile.contains(profile.opt)
