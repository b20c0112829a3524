"""Inference backends: each builds an engine from an ONNX model and runs it behind `Runner`.

optimizer/registries/backends.py declares them (`Backend`, `BACKENDS`), re-exported here;
importing this package loads no backend (the CLI's --help reads it)."""

from optimizer.registries.backends import BACKENDS, Backend, BackendSpec

__all__ = ["BACKENDS", "Backend", "BackendSpec"]
