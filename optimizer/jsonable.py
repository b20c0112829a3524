"""Make report values strict JSON: non-finite floats become None (PostgreSQL JSON refuses NaN)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["json_safe"]


def json_safe(value: Any) -> Any:
    """`value` with every NaN/Inf replaced by None and tuples turned into lists, recursively
    (mapping keys become strings): what `json.dumps(..., allow_nan=False)` and PostgreSQL's JSON
    accept. The one place report `to_dict` methods make their values strict JSON.

    >>> json_safe({"max_abs_err": float("inf"), "shape": (2, 3)})
    {'max_abs_err': None, 'shape': [2, 3]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
