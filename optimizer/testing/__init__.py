"""Harnesses the test suite shares with bench/: model zoo, pass checks, Triton kernel launches.

Nothing here is part of the optimizer's service path: no module outside optimizer/testing
imports this package. This file imports nothing, so that `optimizer.testing.triton_launch` and
`optimizer.testing.kernel_checks` load on a GPU machine that has only numpy, torch and triton
(optimizer/__init__.py imports nothing either); the other modules need onnx and onnxruntime.
"""

__all__: list[str] = []
