"""A stand-in third backend and a third float precision, registered as a plug-in registers them:
what proves that a backend or a precision is one registration, not a chain of branches.

- backend "stand-in": ONNX Runtime's builder, runner and job strategy under another name and
  label, on the CPU queue; it runs fp32, int8 and the stand-in precision, and refuses bf16 with
  a reason of its own (its spec's `why_not`).
- precision "half": converts like fp16 (float16 in the graph) with a spec of its own (its
  label, fidelity between fp16's and bf16's); only the stand-in backend runs it.

`register` is the plug-in's function (`Settings.plugins`: "tests.support.stand_in:register",
so a job's process registers them too); `registered()` registers them for a block in this
process and removes them after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from optimizer.registries.backends import (
    BACKENDS,
    Backend,
    BackendSpec,
    register_backend,
    unregister_backend,
)
from optimizer.registries.plug_ins import plug_in_member
from optimizer.registries.precisions import (
    PRECISIONS,
    Precision,
    register_precision,
    unregister_precision,
)
from worker.pipeline.backends.registry import (
    JOB_BACKENDS,
    register_job_backend,
    unregister_job_backend,
)

__all__ = ["HALF", "HALF_SPEC", "PLUGIN", "STAND_IN", "STAND_IN_BF16", "register", "registered",
           "stand_in_spec", "unregister"]

PLUGIN = "tests.support.stand_in:register"

STAND_IN = plug_in_member(Backend, "stand-in")
HALF = plug_in_member(Precision, "half")

HALF_SPEC = replace(PRECISIONS[Precision.FP16], name=HALF, label="half (stand-in float16)",
                    fidelity=75)

STAND_IN_BF16 = "the stand-in runs no bf16 (it is ONNX Runtime's CPU provider underneath)."


def stand_in_spec() -> BackendSpec:
    """The stand-in's spec (built once HALF is registered: a spec's precisions must be)."""
    onnxruntime = BACKENDS[Backend.ONNXRUNTIME]
    return replace(
        onnxruntime, name=STAND_IN, label="Stand-in", queue_name="cpu",
        precisions=(Precision.FP32, HALF, Precision.INT8),
        precision_order=(Precision.INT8, Precision.FP32, HALF),
        why_not={**onnxruntime.why_not, Precision.BF16: STAND_IN_BF16})


def register() -> None:
    """Register the precision, the backend and its job strategy (ONNX Runtime's)."""
    register_precision(HALF_SPEC)
    register_backend(stand_in_spec())
    register_job_backend(STAND_IN, JOB_BACKENDS[Backend.ONNXRUNTIME])


def unregister() -> None:
    unregister_job_backend(STAND_IN)
    unregister_backend(STAND_IN)
    unregister_precision(HALF)


@contextmanager
def registered() -> Iterator[None]:
    """The stand-in backend and precision, registered in this process for the block."""
    register()
    try:
        yield
    finally:
        unregister()
