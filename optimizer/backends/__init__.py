"""Inference backends: each builds an engine from an ONNX model and runs it behind `Runner`.

`BACKENDS` names them; importing this package loads no backend (the CLI's --help reads it)."""

__all__ = ["BACKENDS"]

BACKENDS = ("onnxruntime", "tensorrt")
