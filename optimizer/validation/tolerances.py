"""The limits an optimized model's outputs must meet, with their defaults per precision."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

from optimizer.registries.precisions import PRECISIONS

__all__ = ["Tolerances", "default_tolerances"]


@dataclass(frozen=True)
class Tolerances:
    """The limits every output must meet.

    Always checked: elementwise |candidate - reference| <= atol + rtol * |reference|, and the
    cosine similarity floor. Checked only when set (None: not checked): the limits on the other
    metrics; top-k and accuracy limits apply to outputs holding class scores (see
    `compare_outputs`), `max_accuracy_drop` only when labels are given. Agreements and accuracy
    drops are fractions: 0.99 is 99%, 0.01 one point.
    """

    atol: float
    rtol: float
    min_cosine: float
    max_rel_err: float | None = None
    max_rmse: float | None = None
    min_snr_db: float | None = None
    min_top1_agreement: float | None = None
    min_top5_agreement: float | None = None
    max_accuracy_drop: float | None = None

    def to_dict(self) -> dict[str, float]:
        """The limits in force; unset optional limits are left out."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    def with_overrides(self, overrides: Mapping[str, float | None]) -> Tolerances:
        """A copy with the given limits replaced (a job's overrides); None keeps the current one.

        >>> default_tolerances("fp16").with_overrides({"atol": 1e-3, "min_snr_db": 40})
        ... # doctest: +SKIP

        Raises:
            ValueError: an unknown limit name, a value that is not a finite number, or a value
                out of its range (tolerances below 0, cosine outside [-1, 1], agreements and
                accuracy drops outside [0, 1]).
        """
        known = [field.name for field in fields(self)]
        changes: dict[str, float] = {}
        for name, value in overrides.items():
            if name not in known:
                raise ValueError(f"Unknown tolerance {name!r}; expected one of "
                                 f"{', '.join(known)}.")
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"Tolerance {name!r} must be a finite number, got {value!r}.")
            low, high = _LIMIT_RANGES.get(name, (-math.inf, math.inf))
            if not low <= value <= high:
                raise ValueError(f"Tolerance {name!r} must lie in [{low:g}, {high:g}], got "
                                 f"{value!r}.")
            changes[name] = float(value)
        return replace(self, **changes)


_LIMIT_RANGES = {
    "atol": (0.0, math.inf),
    "rtol": (0.0, math.inf),
    "min_cosine": (-1.0, 1.0),
    "max_rel_err": (0.0, math.inf),
    "max_rmse": (0.0, math.inf),
    "min_top1_agreement": (0.0, 1.0),
    "min_top5_agreement": (0.0, 1.0),
    "max_accuracy_drop": (0.0, 1.0),
}

def default_tolerances(precision: str) -> Tolerances:
    """The tolerances for an engine built at `precision` (a `Precision`, or its name): its
    registry entry's (optimizer/registries/precisions.py), read on each call so a precision
    registered later has them too.

    Raises:
        ValueError: any other precision.
    """
    for name, spec in PRECISIONS.items():
        if name == precision:
            return Tolerances(**spec.tolerances)
    raise ValueError(
        f"No default tolerances for precision {precision!r}; expected one of "
        f"{', '.join(PRECISIONS)}.")
