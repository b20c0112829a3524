"""The runner the quantization search judges and times OpenVINO's int8 candidates with.

A candidate (the Q/DQ ONNX model NNCF wrote) and the fp32 graph it is timed against are both
compiled by OpenVINO's CPU plugin at inference precision f32, at the job's threads: the int8
layers run in u8/i8, and everything else in f32, as the engine the IR builder makes from the
shipped model does, so the accuracy judged is the accuracy shipped (bf16, the CPU plugin's
default on a CPU that has it, would add its own error to int8's).
"""

from __future__ import annotations

from pathlib import Path

from optimizer.backends.openvino.runner import INFERENCE_PRECISIONS, OpenVinoRunner
from optimizer.registries.precisions import REFERENCE_PRECISION

__all__ = ["candidate_runner"]


def candidate_runner(model_path: Path, threads: int | None) -> OpenVinoRunner:
    """`model_path` (ONNX) compiled for OpenVINO's CPU plugin in f32 at `threads`.

    Raises:
        EngineBuildError: OpenVINO cannot read or compile it.
    """
    return OpenVinoRunner(model_path, inference_precision=INFERENCE_PRECISIONS[REFERENCE_PRECISION],
                          threads=threads)
