"""Per-output metrics on hand-made arrays whose values are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optimizer.validation.metrics import (
    REL_ERR_FLOOR,
    class_metrics,
    error_metrics,
    looks_like_class_scores,
    tolerance_excess,
)


def test_error_metrics_of_a_known_difference():
    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    cand = np.array([1.0, 2.5, 3.0, 3.0], np.float32)  # errors 0, 0.5, 0, 1

    m = error_metrics([ref], [cand])

    assert m.max_abs_err == 1.0
    assert m.mean_abs_err == pytest.approx(1.5 / 4)
    assert m.rmse == pytest.approx(math.sqrt(1.25 / 4))
    assert m.snr_db == pytest.approx(10 * math.log10(30 / 1.25))  # Σr² = 30, Σe² = 1.25
    assert m.max_rel_err == pytest.approx(0.25)  # 0.5 / 2 and 1 / 4
    assert m.cosine_similarity == pytest.approx(
        float(ref @ cand) / float(np.linalg.norm(ref) * np.linalg.norm(cand)))


def test_error_metrics_pools_every_sample():
    refs = [np.zeros(3), np.zeros(3)]
    cands = [np.array([0.0, 0.0, 3.0]), np.array([0.0, 4.0, 0.0])]

    m = error_metrics(refs, cands)

    assert (m.max_abs_err, m.mean_abs_err) == (4.0, pytest.approx(7 / 6))
    assert m.rmse == pytest.approx(math.sqrt(25 / 6))


def test_error_percentiles_are_order_statistics_of_the_absolute_errors():
    ref = np.zeros(100)
    cand = -np.random.default_rng(3).permutation(np.arange(1, 101)) / 100  # |errors| 0.01..1

    m = error_metrics([ref], [cand])

    assert (m.abs_err_p50, m.abs_err_p90, m.abs_err_p99) == \
        (pytest.approx(0.50), pytest.approx(0.90), pytest.approx(0.99))


def test_cosine_of_orthogonal_and_half_aligned_outputs():
    assert error_metrics([np.array([1.0, 0.0])], [np.array([0.0, 1.0])]).cosine_similarity == 0.0
    assert error_metrics([np.array([1.0, 0.0])], [np.array([1.0, 1.0])]).cosine_similarity == \
        pytest.approx(1 / math.sqrt(2))


def test_snr_is_infinite_without_error_and_minus_infinite_with_a_nan():
    ref = np.array([1.0, -2.0])

    assert error_metrics([ref], [ref.copy()]).snr_db == math.inf
    assert error_metrics([ref], [np.array([1.0, np.nan])]).snr_db == -math.inf


def test_snr_of_noise_ten_times_weaker_in_amplitude_is_20_db():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(10_000)
    noise = rng.standard_normal(10_000)
    noise *= 0.1 * np.linalg.norm(ref) / np.linalg.norm(noise)

    assert error_metrics([ref], [ref + noise]).snr_db == pytest.approx(20.0)


def test_relative_error_against_a_near_zero_reference_uses_the_floor():
    ref = np.array([1e-9, 1.0, -1.0, 1.0])
    cand = ref + 1e-7

    m = error_metrics([ref], [cand])

    # Without the floor, 1e-7 / 1e-9 = 100; with it, 1e-7 / (1e-3 * RMS(ref)).
    floor = REL_ERR_FLOOR * math.sqrt((1e-18 + 3) / 4)
    assert m.max_rel_err == pytest.approx(1e-7 / floor)
    assert m.max_rel_err < 1e-3


def test_relative_error_of_an_all_zero_reference_is_the_absolute_error():
    m = error_metrics([np.zeros(4)], [np.array([0.0, 0.0, 2e-3, 0.0])])

    assert m.max_rel_err == pytest.approx(2e-3)


def test_nan_and_inf_are_counted_on_both_sides():
    ref = np.array([np.nan, 1.0, np.inf, 2.0, 3.0], np.float32)
    cand = np.array([np.nan, np.nan, np.inf, -np.inf, np.nan], np.float32)

    m = error_metrics([ref], [cand])

    assert (m.reference_nan_count, m.reference_inf_count) == (1, 1)
    assert (m.candidate_nan_count, m.candidate_inf_count) == (3, 2)
    assert m.max_abs_err == math.inf and m.rmse == math.inf


def test_matching_nans_and_equal_infinities_count_as_no_error():
    ref = np.array([np.nan, np.inf, -np.inf, 5.0])

    m = error_metrics([ref], [ref.copy()])

    assert (m.max_abs_err, m.max_rel_err, m.rmse, m.abs_err_p99) == (0.0, 0.0, 0.0, 0.0)


def _ranked_scores(top: list[int], classes: int = 10) -> np.ndarray:
    """Rows whose classes rank in the order given by `top` first, then the rest ascending."""
    rows = np.zeros((len(top), classes), np.float32)
    for row, first in enumerate(top):
        order = [first, *[c for c in range(classes) if c != first]]
        rows[row, order] = np.linspace(1.0, 0.0, classes)
    return rows


def test_top1_and_top5_agreement_of_known_rankings():
    # The candidate ranks classes 0 > 1 > 2 > ... in every row: its top-5 is {0, 1, 2, 3, 4}.
    cand = np.tile(np.linspace(1.0, 0.0, 10, dtype=np.float32), (4, 1))
    ref = _ranked_scores([0, 3, 4, 7])

    m = class_metrics([ref], [cand])

    assert m.top1_agreement == pytest.approx(1 / 4)  # only row 0 has top-1 class 0
    assert m.top5_agreement == pytest.approx(3 / 4)  # 0, 3 and 4 are in the top 5; 7 is not
    assert m.reference_accuracy is m.candidate_accuracy is m.accuracy_drop is None


def test_top5_agreement_is_not_reported_for_five_classes_or_fewer():
    scores = _ranked_scores([0, 1], classes=5)

    assert class_metrics([scores], [scores]).top5_agreement is None


def test_class_metrics_treat_each_row_of_the_leading_axes_as_a_prediction():
    ref = _ranked_scores([1, 2, 3, 4, 5, 6]).reshape(2, 3, 10)  # [batch, tokens, vocab]
    cand = _ranked_scores([1, 2, 3, 4, 5, 9]).reshape(2, 3, 10)

    assert class_metrics([ref], [cand]).top1_agreement == pytest.approx(5 / 6)


def test_labels_give_both_accuracies_and_the_points_lost():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 10, 100)
    ref_top = labels.copy()
    ref_top[:10] = (labels[:10] + 1) % 10  # the reference is right 90 times in 100
    cand_top = ref_top.copy()
    cand_top[10:12] = (labels[10:12] + 3) % 10  # the candidate loses two of those
    ref, cand = _ranked_scores(list(ref_top)), _ranked_scores(list(cand_top))

    # Two samples of 50 predictions each, labels split the same way.
    m = class_metrics([ref[:50], ref[50:]], [cand[:50], cand[50:]], [labels[:50], labels[50:]])

    assert m.reference_accuracy == pytest.approx(0.90)
    assert m.candidate_accuracy == pytest.approx(0.88)
    assert m.accuracy_drop == pytest.approx(0.02)
    assert m.top1_agreement == pytest.approx(0.98)


def test_class_metrics_refuse_labels_of_the_wrong_size():
    scores = _ranked_scores([0, 1])

    with pytest.raises(ValueError, match="3 labels for 2 predictions"):
        class_metrics([scores], [scores], [np.array([0, 1, 2])])


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.zeros((2, 10), np.float32), True),
        (np.zeros((1, 2), np.float16), True),
        (np.zeros((2, 1), np.float32), False),  # one class is a score, not a choice
        (np.zeros((2, 10), np.int64), False),
        (np.zeros((2, 3, 10), np.float32), False),  # token logits: declare them explicitly
        (np.zeros(10, np.float32), False),
    ],
)
def test_looks_like_class_scores_only_for_float_batch_by_classes(array, expected):
    assert looks_like_class_scores(array) is expected


def test_tolerance_excess_counts_elements_outside_and_finds_the_worst():
    ref = np.array([1.0, 0.0, np.nan, np.inf, 2.0])
    cand = np.array([1.05, 1e-4, np.nan, np.inf, 2.02])  # allowances 0.02, 0.01, -, -, 0.03

    excess = tolerance_excess([ref], [cand], atol=0.01, rtol=0.01)

    assert (excess.elements, excess.outside) == (5, 1)
    assert excess.worst_ratio == pytest.approx(0.05 / 0.02)
    assert (excess.worst_abs_err, excess.worst_reference) == (pytest.approx(0.05), 1.0)


def test_tolerance_excess_is_infinite_for_a_nan_or_a_changed_infinity():
    excess = tolerance_excess([np.array([1.0, np.inf])], [np.array([np.nan, 1.0])],
                              atol=1.0, rtol=1.0)

    assert excess.outside == 2 and excess.worst_ratio == math.inf


@pytest.mark.parametrize("seed", range(5))
def test_tolerance_excess_agrees_with_allclose(seed):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(50)
    cand = ref + rng.normal(0, 1e-3, 50)
    cand[rng.integers(0, 50)] = np.nan if seed % 2 else cand[0]

    outside = tolerance_excess([ref], [cand], atol=1e-3, rtol=1e-3).outside

    inside = np.isclose(cand, ref, atol=1e-3, rtol=1e-3, equal_nan=True)
    assert outside == int(np.count_nonzero(~inside))
