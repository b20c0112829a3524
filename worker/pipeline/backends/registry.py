"""The worker-side strategy of each backend: `Backend` → the factory of its `JobBackend`.

The optimizer's registry (optimizer/registries/backends.py) says what a backend is; this says how
a job runs on it here. A new backend adds its strategy module and one entry below.
"""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from optimizer.registries.backends import Backend
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.backends.onnxruntime import OnnxRuntimeBackend
from worker.pipeline.backends.tensorrt import TensorRTBackend
from worker.pipeline.progress import StageProgress
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import JobRun
from worker.runtime import WorkerRuntime

__all__ = ["JOB_BACKENDS", "JobBackendFactory"]

JobBackendFactory = Callable[[JobRun, WorkerRuntime, JobRecorder, StageProgress], JobBackend[Any]]


def _onnxruntime(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
                 progress: StageProgress) -> JobBackend[Any]:
    return OnnxRuntimeBackend(run)


def _tensorrt(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
              progress: StageProgress) -> JobBackend[Any]:
    return TensorRTBackend(run, toolkit=runtime.toolkit, capabilities=runtime.capabilities,
                           recorder=recorder, on_gpu_wait=progress.waiting)


def _openvino(run: JobRun, runtime: WorkerRuntime, recorder: JobRecorder,
              progress: StageProgress) -> JobBackend[Any]:
    # Imported on first use: a worker host without OpenVINO never takes its queue.
    from worker.pipeline.backends.openvino import OpenVinoBackend

    return OpenVinoBackend(run, capabilities=runtime.capabilities)


JOB_BACKENDS: Mapping[Backend, JobBackendFactory] = MappingProxyType({
    Backend.ONNXRUNTIME: _onnxruntime,
    Backend.TENSORRT: _tensorrt,
    Backend.OPENVINO: _openvino,
})
