"""Measure how far a precision-converted model's outputs drift from the float32 original's.

The reference is always the unmodified original, run in float32 on onnxruntime's CPU provider.
The candidate is the converted model run by a real backend when the caller has one (a GPU
runner: TensorRT later), or else its CPU emulation (`emulate.py`: float32 compute, every
low-precision tensor rounded). The verdict uses `compare_outputs` and the precision's default
tolerances, so both paths are judged alike and the report says which one ran.

Graphs fused for TensorRT hold fuseforge plugin nodes: the emulation treats each as one op
(float32 inside, its low-precision outputs rounded, as the plugin kernels compute), and the
emulated graph then runs with the plugins decomposed into standard ops (`runner_for_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import runner_for_model
from optimizer.backends.runner import Runner
from optimizer.errors import InternalError
from optimizer.model.tensor_specs import numpy_dtype
from optimizer.precision.convert import Precision
from optimizer.precision.emulate import emulate_precision
from optimizer.validation.compare import ValidationReport, compare_outputs
from optimizer.validation.tolerances import Tolerances, default_tolerances

__all__ = [
    "EMULATED",
    "PrecisionEvaluation",
    "evaluate_precision",
    "model_runner",
    "run_outputs",
]

EMULATED = "onnxruntime-cpu-emulated"  # the backend name a CPU emulation reports

Outputs = list[dict[str, np.ndarray]]


@dataclass(frozen=True)
class PrecisionEvaluation:
    """A converted model's outputs against the float32 original, and how they were obtained."""

    method: Literal["emulated", "backend"]
    backend: str  # EMULATED, or the runner's backend (e.g. "tensorrt")
    validation: ValidationReport

    @property
    def passed(self) -> bool:
        return self.validation.passed

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "backend": self.backend,
                "validation": self.validation.to_dict()}


def evaluate_precision(
    original: onnx.ModelProto,
    converted: onnx.ModelProto | None,
    feeds: Sequence[Mapping[str, np.ndarray]],
    *,
    precision: Precision | Literal["fp32"],
    tolerances: Tolerances | None = None,
    candidate: Runner | None = None,
    reference: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> PrecisionEvaluation:
    """Compare `converted` with `original` on `feeds` (the original's input types).

    `candidate`, when given, is a runner already holding `converted` on a real backend (then
    `converted` may be None: it is not read); feeds are cast to its input types and its outputs
    to the reference's. Without one the CPU emulation of `converted` runs. `reference` takes
    the original's outputs on `feeds` when the caller already has them (a precision search
    evaluates many variants against one reference). `precision` picks the default tolerances
    when `tolerances` is None ("fp32" for an engine judged at full precision).

    Raises:
        EngineBuildError, InferenceError: onnxruntime cannot load or run a model.
    """
    if reference is None:
        reference = run_outputs(original, feeds)
    if candidate is None:
        if converted is None:
            raise InternalError("evaluate_precision needs the converted model or a candidate")
        outputs = run_outputs(emulate_precision(converted), feeds)
        method: Literal["emulated", "backend"] = "emulated"
        backend = EMULATED
    else:
        outputs = _infer_all(candidate, feeds)
        method, backend = "backend", candidate.spec().backend
    aligned = [_like(sample, ref) for sample, ref in zip(outputs, reference, strict=True)]
    report = compare_outputs(reference, aligned, tolerances or default_tolerances(precision))
    return PrecisionEvaluation(method=method, backend=backend, validation=report)


def run_outputs(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]) -> Outputs:
    """`model`'s outputs on each feed, from onnxruntime's CPU provider with its graph
    optimizations off (so the graph runs as written; plugin nodes decomposed)."""
    with model_runner(model) as runner:
        return _infer_all(runner, feeds)


# An OnnxRuntimeRunner for an in-memory model, graph optimizations off (its default), plugin
# nodes decomposed, from a temporary file (< 2 GiB).
model_runner = runner_for_model


def _infer_all(runner: Runner, feeds: Sequence[Mapping[str, np.ndarray]]) -> Outputs:
    dtypes = {spec.name: numpy_dtype(spec.dtype) for spec in runner.inputs}
    return [runner.infer({name: np.asarray(array).astype(dtypes.get(name, np.asarray(array).dtype),
                                                         copy=False)
                          for name, array in feed.items()})
            for feed in feeds]


def _like(sample: Mapping[str, np.ndarray],
          reference: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`sample` with each output in the reference's dtype (a low-precision output upcast)."""
    aligned = {}
    for name, array in sample.items():
        want = reference[name].dtype if name in reference else array.dtype
        aligned[name] = array.astype(want, copy=False) if array.dtype != want else array
    return aligned
