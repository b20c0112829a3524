"""Every backend has a worker-side strategy, and `backend_for` picks it by the job's backend."""

from optimizer.registries.backends import Backend
from worker.pipeline.backends.onnxruntime import OnnxRuntimeBackend
from worker.pipeline.backends.registry import JOB_BACKENDS
from worker.pipeline.backends.tensorrt import TensorRTBackend


def test_every_backend_has_a_job_backend_of_its_name() -> None:
    assert set(JOB_BACKENDS) == set(Backend)
    assert OnnxRuntimeBackend.name is Backend.ONNXRUNTIME
    assert TensorRTBackend.name is Backend.TENSORRT
