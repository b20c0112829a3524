"""Mixed precision: convert a float32 model to float16/bfloat16 and judge the result.

`convert_precision` writes the low-precision graph TensorRT 11 needs (keeping numerically
sensitive ops in float32 per a `KeepPolicy`); `evaluate_precision` compares it with the float32
original, on a real backend when one is given and otherwise through the CPU emulation in
`emulate.py`, whose docstring says how faithful that is. The precisions themselves are named
in optimizer/registries/precisions.py.

The names below load on first use: `optimizer.registries.precisions` (the vocabulary the CLI's
--help reads) must be importable without numpy and onnx, which the other modules load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optimizer.precision.convert import LOW_DTYPES, KeptNode, PrecisionReport, convert_precision
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

_MODULE_OF = {
    **dict.fromkeys(("LOW_DTYPES", "KeptNode", "PrecisionReport", "convert_precision"), "convert"),
    "emulate_precision": "emulate",
    **dict.fromkeys(("EMULATED", "PrecisionEvaluation", "evaluate_precision", "model_runner",
                     "run_outputs"), "evaluate"),
    **dict.fromkeys(("DEFAULT_KEEP", "NO_KEEP", "KeepPolicy"), "keep_list"),
    "search_precision": "search",
    **dict.fromkeys(("AccuracyBudget", "AccuracyReached", "KeptFp32Node", "PrecisionSearchResult"),
                    "search_result"),
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
