"""random_feeds: seeded test inputs of every supported dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optimizer.errors import InputRangeError, InternalError, UnsupportedModelError
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec

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


def test_ranged_integers_cover_low_to_high_minus_one_only():
    feed = random_feeds([TensorSpec("ids", "int64", (2000,))], count=1, seed=0,
                        ranges={"ids": (5, 9)})[0]

    assert set(np.unique(feed["ids"]).tolist()) == {5, 6, 7, 8}
    assert feed["ids"].dtype == np.int64


def test_ranged_token_ids_reach_a_large_vocabulary():
    feed = random_feeds([TensorSpec("input_ids", "int32", (4, 512))], count=1, seed=1,
                        ranges={"input_ids": (0, 30522)})[0]

    ids = feed["input_ids"]
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 30522
    assert ids.max() > 29000  # uniform over the vocabulary, not just small ids


def test_ranged_floats_are_uniform_between_the_bounds():
    feed = random_feeds([TensorSpec("x", "float32", (5000,))], count=1, seed=2,
                        ranges={"x": (-3.0, 2.0)})[0]

    assert -3.0 <= feed["x"].min() < -2.9 and 1.9 < feed["x"].max() < 2.0
    assert float(feed["x"].mean()) == pytest.approx(-0.5, abs=0.1)


def test_a_range_for_one_input_leaves_the_others_unchanged():
    specs = [TensorSpec("x", "float32", (3, 4)), TensorSpec("ids", "int64", (3,))]

    plain = random_feeds(specs, count=2, seed=9)
    ranged = random_feeds(specs, count=2, seed=9, ranges={"ids": (100, 200)})

    for a, b in zip(plain, ranged, strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])
        assert b["ids"].min() >= 100


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({"image": (0, 1)}, "input 'image', but the model has no input of that name; its "
                            "inputs are: 'ids', 'x', 'mask', 'small'"),
        ({"ids": (5, 5)}, "range \\[5, 5\\) is empty; low must be below high"),
        ({"x": (1.0, -1.0)}, "low must be below high"),
        ({"ids": (0, 10.5)}, "integer dtype int64.*fractional bound; give whole numbers, e.g. "
                             "\\[0, 11\\)"),
        ({"small": (0, 300)}, "dtype uint8, which holds 0..255.*keep low >= 0 and high <= 256"),
        ({"small": (-1, 10)}, "dtype uint8"),
        ({"mask": (0, 1)}, "'mask' is bool, which takes no value range"),
        ({"x": (0, math.inf)}, "bound inf is not a finite number"),
        ({"x": (0, 1, 2)}, "is not a pair \\[low, high\\]"),
        ({"x": "0,1"}, "is not a pair"),
        ({"x": (True, 2)}, "bound True is not a finite number"),
    ],
)
def test_random_feeds_refuses_bad_ranges(ranges, message):
    specs = [TensorSpec("ids", "int64", (2,)), TensorSpec("x", "float32", (2,)),
             TensorSpec("mask", "bool", (2,)), TensorSpec("small", "uint8", (2,))]

    with pytest.raises(InputRangeError, match=message) as caught:
        random_feeds(specs, count=1, seed=0, ranges=ranges)
    assert caught.value.input_name == next(iter(ranges))
