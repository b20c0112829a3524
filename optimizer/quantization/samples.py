"""Which samples calibrate and which judge: never the same ones.

Without a validation set of its own, the last fifth of the calibration samples (at least one)
is held apart to judge the quantized model and does not calibrate; the rest calibrate in their
order, so a rerun computes the same ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.errors import DatasetError

__all__ = ["HeldApart", "hold_apart"]

_HELD_APART = 5  # one sample in five judges the model


@dataclass(frozen=True)
class HeldApart:
    calibration: list[dict[str, np.ndarray]]
    validation: list[dict[str, np.ndarray]]
    labels: np.ndarray | None  # the validation samples' labels, when the dataset has them
    note: str


def hold_apart(feeds: Sequence[dict[str, np.ndarray]], labels: np.ndarray | None, *,
               field: str) -> HeldApart:
    """Split calibration samples into those that calibrate and those that judge.

    Raises:
        DatasetError: `field`: one sample only, so nothing can be held apart.
    """
    total = len(feeds)
    if total < 2:
        raise DatasetError(
            f"{field}: the calibration dataset has {total} sample(s) and no validation dataset "
            "is named: there is nothing to hold apart to judge the quantized model. Upload more "
            "samples, or a validation dataset.", field=field)
    split = total - max(1, total // _HELD_APART)
    return HeldApart(
        list(feeds[:split]), list(feeds[split:]),
        None if labels is None else labels[split:],
        f"no validation dataset named: samples {split}-{total - 1} of the calibration dataset "
        f"are held apart to judge the model; samples 0-{split - 1} calibrate, in file order")
