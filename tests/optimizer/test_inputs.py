"""random_feeds: seeded test inputs of every supported dtype."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.errors import InternalError, UnsupportedModelError
from optimizer.inputs import random_feeds
from optimizer.tensor_specs import TensorSpec

SPECS = [
    TensorSpec("image", "float32", (2, 3, 4, 4)),
    TensorSpec("half", "float16", (2, 5)),
    TensorSpec("brain", "bfloat16", (3,)),
    TensorSpec("ids", "int64", (2, 7)),
    TensorSpec("small_ids", "uint8", (50,)),
    TensorSpec("mask", "bool", (2, 7)),
]


def test_random_feeds_makes_count_feeds_with_the_declared_shapes_and_dtypes():
    feeds = random_feeds(SPECS, count=3, seed=0)

    assert len(feeds) == 3
    for feed in feeds:
        assert list(feed) == [spec.name for spec in SPECS]
        for spec in SPECS:
            assert feed[spec.name].shape == spec.shape
            assert feed[spec.name].dtype.name == spec.dtype


def test_random_feeds_is_the_same_for_the_same_seed():
    first, second = random_feeds(SPECS, count=2, seed=7), random_feeds(SPECS, count=2, seed=7)

    for a, b in zip(first, second, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


def test_random_feeds_differs_between_seeds_and_between_samples():
    (a, b), (c, _) = random_feeds(SPECS, count=2, seed=1), random_feeds(SPECS, count=2, seed=2)

    assert not np.array_equal(a["image"], b["image"])
    assert not np.array_equal(a["image"], c["image"])


def test_random_feeds_draws_integers_from_zero_to_nine_and_floats_around_zero():
    feed = random_feeds([TensorSpec("ids", "int32", (1000,)),
                         TensorSpec("x", "float32", (1000,))], count=1, seed=0)[0]

    assert feed["ids"].min() == 0 and feed["ids"].max() == 9
    assert abs(float(feed["x"].mean())) < 0.2 and 0.8 < float(feed["x"].std()) < 1.2


@pytest.mark.parametrize("dim", ["N", None])
def test_random_feeds_refuses_a_shape_that_is_not_concrete(dim):
    with pytest.raises(InternalError, match="must be a concrete int"):
        random_feeds([TensorSpec("x", "float32", (dim, 3))], count=1, seed=0)


def test_random_feeds_refuses_string_inputs():
    with pytest.raises(UnsupportedModelError, match="'text' has dtype 'string'"):
        random_feeds([TensorSpec("text", "string", (2,))], count=1, seed=0)
