"""Tolerances: the defaults per precision, and overrides checked for name and range."""

from __future__ import annotations

import math

import pytest

from optimizer.validation.tolerances import Tolerances, default_tolerances

FP32 = default_tolerances("fp32")


def test_default_tolerances_grow_looser_with_lower_precision():
    fp32, fp16, bf16 = (default_tolerances(p) for p in ("fp32", "fp16", "bf16"))

    assert fp32 == Tolerances(atol=1e-4, rtol=1e-3, min_cosine=0.9999)
    assert fp16 == Tolerances(atol=1e-2, rtol=1e-2, min_cosine=0.999)
    # bf16, like int8, has no elementwise limit (its registry entry says why): a cosine floor
    # tighter than int8's, and the top-1 agreement.
    assert bf16 == Tolerances(atol=math.inf, rtol=0.0, min_cosine=0.995, min_top1_agreement=0.99)


def test_default_tolerances_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="'int4'; expected one of fp32, fp16, bf16, int8, fp8"):
        default_tolerances("int4")


def test_with_overrides_replaces_the_given_limits_and_keeps_the_rest():
    tolerances = default_tolerances("fp16").with_overrides(
        {"atol": 1e-3, "rtol": None, "min_top1_agreement": 0.99})

    assert tolerances == Tolerances(atol=1e-3, rtol=1e-2, min_cosine=0.999,
                                    min_top1_agreement=0.99)
    assert tolerances.to_dict() == {"atol": 1e-3, "rtol": 1e-2, "min_cosine": 0.999,
                                    "min_top1_agreement": 0.99}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"atl": 1.0}, "Unknown tolerance 'atl'; expected one of atol, rtol"),
        ({"atol": -1.0}, "'atol' must lie in \\[0, inf\\]"),
        ({"min_top1_agreement": 99.0}, "'min_top1_agreement' must lie in \\[0, 1\\]"),
        ({"min_snr_db": math.nan}, "'min_snr_db' must be a finite number"),
        ({"min_cosine": True}, "'min_cosine' must be a finite number"),
    ],
)
def test_with_overrides_refuses_bad_limits(overrides, message):
    with pytest.raises(ValueError, match=message):
        FP32.with_overrides(overrides)
