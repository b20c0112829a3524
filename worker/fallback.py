"""Keep the largest validated set of rewrites when the engine fails validation.

Tried in order until one validates: the job's passes without the rules bisection blamed; no
passes at the job's ONNX Runtime level; the unfused model with ONNX Runtime's optimizations off,
which is the reference itself and so always valid. A tensorrt job's last attempt is TensorRT's
engine of the unfused model: if that fails too, the difference is TensorRT's own and the job
fails saying so.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from optimizer.errors import InternalError
from optimizer.validation import Tolerances, ValidationReport
from worker.context import JobContext

__all__ = ["fall_back"]

Validator = Callable[[JobContext, Sequence[Mapping[str, np.ndarray]], Tolerances], ValidationReport]


def _attempts(ctx: JobContext) -> Iterator[str]:
    """Adjust `ctx` for the next, more conservative attempt; yield what it keeps."""
    culprits = tuple(ctx.accuracy.get("bisection", {}).get("culprits", ()))
    blamed = tuple(rule for group in culprits for rule in group)
    if blamed:
        ctx.excluded_rules = blamed
        yield f"the job's passes without rule(s) {', '.join(blamed)}"
    ctx.excluded_rules, ctx.passes_override = (), "none"
    if ctx.config["backend"] == "tensorrt":
        yield "no fusion passes: TensorRT's engine of the unfused model"
        return
    yield f"no fusion passes, ONNX Runtime level '{ctx.config['ort_optimization_level']}'"
    ctx.ort_level_override = "disabled"
    yield "the unfused model with ONNX Runtime's optimizations off (the reference itself)"


def fall_back(
    ctx: JobContext,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    rebuild: Callable[[JobContext], None],
    validate_engine: Validator,
) -> None:
    """Rebuild (optimize + build_engine) and revalidate until an attempt passes."""
    first_failure = ctx.validation
    for kept in _attempts(ctx):
        rebuild(ctx)
        ctx.validation = validate_engine(ctx, feeds, tolerances)
        if ctx.validation.passed:
            ctx.accuracy["fallback"] = {
                "kept": kept,
                "excluded_rules": list(ctx.excluded_rules),
                "passes": ctx.passes_override or ctx.config["passes"],
                "ort_optimization_level": ctx.ort_level_override
                or ctx.config["ort_optimization_level"],
                "first_failure": first_failure.to_dict() if first_failure else None,
            }
            return
    if ctx.config["backend"] == "tensorrt" and ctx.validation is not None:
        ctx.validation.raise_if_failed(
            "TensorRT's engine of the unfused model (so no set of FuseForge rewrites can pass: "
            "the difference is TensorRT's own; loosen the tolerances or use a wider precision)")
    raise InternalError("the unoptimized model failed validation against itself")
