"""Validation: does an optimized model reproduce the original's outputs, and if not, where not.

`compare` holds the per-output metrics and the verdict; later modules add datasets,
divergence localisation and pass bisection. The names below are the public surface.
"""

from optimizer.validation.compare import (
    OutputComparison,
    Tolerances,
    ValidationReport,
    compare_outputs,
    default_tolerances,
    validate,
)

__all__ = [
    "OutputComparison",
    "Tolerances",
    "ValidationReport",
    "compare_outputs",
    "default_tolerances",
    "validate",
]
