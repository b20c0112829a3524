"""OpenVINO backend: IR engines (build.py) and a CPU runner (runner.py).

Importing this package loads OpenVINO; the registry names its modules by dotted path, so only a
process that runs an OpenVINO job imports it.
"""

from optimizer.backends.openvino.build import (
    OvBuildOptions,
    OvEngine,
    build_ov_engine,
    runner_for_engine,
)
from optimizer.backends.openvino.runner import OpenVinoRunner

__all__ = [
    "OpenVinoRunner",
    "OvBuildOptions",
    "OvEngine",
    "build_ov_engine",
    "runner_for_engine",
]
