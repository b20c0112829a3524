"""Validation: does an optimized model reproduce the original's outputs, and if not, where not.

`compare` and `metrics` hold the per-output metrics and the verdict, `tolerances` the limits,
`datasets` reads user inputs, `localize` finds the first divergent tensor, `bisect` names the
rewrite rule that broke equivalence.
"""

from optimizer.validation.compare import (
    MetricFailure,
    OutputComparison,
    ShapeCheck,
    ValidationReport,
    compare_outputs,
    validate,
    validate_against,
    with_inputs,
)
from optimizer.validation.datasets import (
    Dataset,
    DatasetContents,
    inspect_dataset,
    load_dataset,
)
from optimizer.validation.localize import Divergence, TensorError, localize_divergence
from optimizer.validation.tolerances import Tolerances, default_tolerances

__all__ = [
    "Dataset",
    "DatasetContents",
    "Divergence",
    "MetricFailure",
    "TensorError",
    "OutputComparison",
    "ShapeCheck",
    "Tolerances",
    "ValidationReport",
    "compare_outputs",
    "default_tolerances",
    "inspect_dataset",
    "load_dataset",
    "localize_divergence",
    "validate",
    "validate_against",
    "with_inputs",
]
