"""Inference backends: each builds an engine from an ONNX model and runs it behind `Runner`."""

__all__: list[str] = []
