"""FuseForge's optimizer: a plain library that checks, rewrites, builds and measures ONNX models.

It imports no web, task-queue or database code and reads no settings; callers pass plain values.
Import the submodules directly (`from optimizer.model_check import check_model_file`) so that
using one part does not load every backend.
"""

__all__: list[str] = []
