"""ONNX Runtime's graph optimization levels as a job names them, apart from the runner (which
imports onnxruntime) so the job config and the CLI's --help can list them without it."""

from typing import Literal

__all__ = ["DEFAULT_ORT_LEVEL", "OrtLevel"]

OrtLevel = Literal["disabled", "basic", "extended", "all"]
DEFAULT_ORT_LEVEL: OrtLevel = "all"
