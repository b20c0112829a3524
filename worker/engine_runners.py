"""Open a runner on the engine a job built, whichever backend built it."""

from contextlib import AbstractContextManager

from api.settings import get_settings
from optimizer.backends.onnxruntime.build import OrtEngine, runner_for_engine
from optimizer.backends.tensorrt import TrtEngine
from optimizer.errors import InternalError
from optimizer.runner import Runner
from worker.capabilities import detect_worker_capabilities
from worker.tensorrt_toolkit import load_toolkit

__all__ = ["open_engine_runner"]


def open_engine_runner(engine: OrtEngine | TrtEngine | None) -> AbstractContextManager[Runner]:
    """A runner (use it in a `with` block) on `engine`: ONNX Runtime, or TensorRT on this
    worker's GPU (refused with a clear message if the engine was built for another GPU or
    TensorRT release).

    Raises:
        InternalError: there is no engine yet.
        EngineBuildError: the engine does not load here.
    """
    if isinstance(engine, OrtEngine):
        return runner_for_engine(engine.manifest_path)
    if isinstance(engine, TrtEngine):
        toolkit = load_toolkit(get_settings().tensorrt_toolkit)
        gpu = detect_worker_capabilities().gpu
        return toolkit.open_runner(engine.metadata_path.parent, gpu=gpu)
    raise InternalError("an engine runner was asked for before build_engine ran")
