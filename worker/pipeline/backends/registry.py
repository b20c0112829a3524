"""The worker-side strategy of each backend: `Backend` → the factory of its `JobBackend`.

The optimizer's registry (optimizer/registries/backends.py) says what a backend is; this says how
a job runs on it here. A new backend adds its strategy module and one entry below; a plug-in's
registers its factory at start-up (`register_job_backend`, from core/plugins.py's call).
"""

import operator
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from optimizer.registries.backends import Backend
from optimizer.registries.plug_ins import add_registered, remove_registered
from worker.pipeline.backends.base import JobBackend
from worker.pipeline.backends.onnxruntime import OnnxRuntimeBackend
from worker.pipeline.backends.tensorrt import TensorRTBackend
from worker.pipeline.progress import StageProgress
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import JobRun
from worker.runtime import WorkerRuntime

__all__ = ["JOB_BACKENDS", "JobBackendFactory", "register_job_backend", "unregister_job_backend"]

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

# JOB_BACKENDS is a read-only view of this dict, as BACKENDS is of the optimizer's registry.
_REGISTERED: dict[Backend, JobBackendFactory] = dict(JOB_BACKENDS)
JOB_BACKENDS = MappingProxyType(_REGISTERED)


def register_job_backend(name: Backend, factory: JobBackendFactory) -> None:
    """Add the strategy of a backend a plug-in registered (optimizer/registries/backends.py's
    `register_backend`). Registering the same factory again does nothing.

    Raises:
        ValueError: another factory is registered for `name`.
    """
    add_registered(_REGISTERED, name, factory, "job strategy of backend", same=operator.is_)


def unregister_job_backend(name: Backend) -> None:
    """Remove a strategy `register_job_backend` added (a test's stand-in, when it ends).

    Raises:
        ValueError: `name` is one of `Backend`'s own members, or was not registered.
    """
    remove_registered(_REGISTERED, name, "job strategy of backend")
