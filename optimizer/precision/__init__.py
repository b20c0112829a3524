"""Mixed precision: convert a float32 model to float16/bfloat16 and judge the result.

`convert_precision` writes the low-precision graph TensorRT 11 needs (keeping numerically
sensitive ops in float32 per a `KeepPolicy`); `evaluate_precision` compares it with the float32
original, on a real backend when one is given and otherwise through the CPU emulation in
`emulate.py`, whose docstring says how faithful that is.
"""

from optimizer.precision.convert import (
    LOW_DTYPES,
    KeptNode,
    Precision,
    PrecisionReport,
    convert_precision,
)
from optimizer.precision.emulate import emulate_precision
from optimizer.precision.evaluate import (
    EMULATED,
    PrecisionEvaluation,
    evaluate_precision,
    model_runner,
    run_outputs,
)
from optimizer.precision.keep_list import DEFAULT_KEEP, NO_KEEP, KeepPolicy
from optimizer.precision.search import search_precision
from optimizer.precision.search_result import (
    AccuracyBudget,
    AccuracyReached,
    KeptFp32Node,
    PrecisionSearchResult,
)

__all__ = [
    "DEFAULT_KEEP",
    "EMULATED",
    "LOW_DTYPES",
    "NO_KEEP",
    "AccuracyBudget",
    "AccuracyReached",
    "KeepPolicy",
    "KeptFp32Node",
    "KeptNode",
    "Precision",
    "PrecisionEvaluation",
    "PrecisionReport",
    "PrecisionSearchResult",
    "convert_precision",
    "emulate_precision",
    "evaluate_precision",
    "model_runner",
    "run_outputs",
    "search_precision",
]
