"""A model with dynamic dims is validated at its default shape and at a larger one, unless
shapes were asked for or a second model fixes them."""

from __future__ import annotations

from optimizer.model.tensor_specs import TensorSpec
from optimizer.validation.shape_plan import validation_shapes

_IDS = TensorSpec("input_ids", "int64", ("batch", "sequence"))
_MASK = TensorSpec("attention_mask", "int64", ("batch", "sequence"))


def test_dynamic_dims_get_the_default_shape_and_batch_2_by_16() -> None:
    assert validation_shapes([_IDS, _MASK], {}) == [
        {"input_ids": (1, 1), "attention_mask": (1, 1)},
        {"input_ids": (2, 16), "attention_mask": (2, 16)},
    ]


def test_a_dim_shared_by_name_gets_one_size_in_every_input() -> None:
    # "sequence" is axis 1 of ids but axis 0 of positions: the first place it is met decides.
    positions = TensorSpec("positions", "int64", ("sequence",))

    larger = validation_shapes([_IDS, positions], {})[1]

    assert larger == {"input_ids": (2, 16), "positions": (16,)}


def test_unnamed_dynamic_dims_and_fixed_dims() -> None:
    image = TensorSpec("image", "float32", (None, 3, None, 224))

    assert validation_shapes([image], {}) == [{"image": (1, 3, 1, 224)},
                                              {"image": (2, 3, 16, 224)}]


def test_requested_shapes_or_static_inputs_give_one_shape() -> None:
    assert validation_shapes([_IDS, _MASK], {"input_ids": [4, 8], "attention_mask": [4, 8]}) \
        == [{"input_ids": (4, 8), "attention_mask": (4, 8)}]
    static = TensorSpec("x", "float32", (1, 3))
    assert validation_shapes([static], {}) == [{"x": (1, 3)}]


def test_dims_the_candidate_fixes_are_fixed() -> None:
    fixed = [TensorSpec("input_ids", "int64", (2, 8)), TensorSpec("attention_mask", "int64", (2, 8))]

    assert validation_shapes([_IDS, _MASK], {}, fixed_by=fixed) == [
        {"input_ids": (2, 8), "attention_mask": (2, 8)}]


def test_a_candidate_fixing_only_the_batch_leaves_the_sequence_to_vary() -> None:
    batch_fixed = [TensorSpec(spec.name, "int64", (2, "sequence")) for spec in (_IDS, _MASK)]

    assert validation_shapes([_IDS, _MASK], {}, fixed_by=batch_fixed) == [
        {"input_ids": (2, 1), "attention_mask": (2, 1)},
        {"input_ids": (2, 16), "attention_mask": (2, 16)},
    ]
