"""Where no GPU exists, the kernel tests run on the CPU through Triton's interpreter.

The interpreter runs only interpreted functions, Triton's own @jit library (tl.zeros, tl.sum,
...) included, and that library is decorated when triton is imported: so triton must be
imported with TRITON_INTERPRET=1 before anything imports it for compilation. This file does it
at collection, only where torch and triton are installed and CUDA is not available; the
variable is unset again right after (subprocesses do not inherit it), and the launch layer sets
it only while a CPU launch runs. On such a machine nothing else in the suite compiles Triton
kernels in-process (test_kernels_compile_for_hopper.py compiles in a subprocess).

`device` parametrizes each kernel test: "cuda" (marked gpu) runs the compiled kernel and skips
without a GPU; "interpreter" runs it on CPU tensors and skips where CUDA is present (one process
cannot hold both: the interpreter's triton cannot compile).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from optimizer.testing import triton_launch

_HAVE_TORCH = importlib.util.find_spec("torch") is not None
_HAVE_TRITON = importlib.util.find_spec("triton") is not None


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


if _HAVE_TORCH and _HAVE_TRITON and not _cuda_available():
    triton_launch.enable_interpreter()

DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu, id="cuda"),
           pytest.param("cpu", id="interpreter")]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Where the kernel runs: "cuda" (compiled) or "cpu" (Triton's interpreter)."""
    if not _HAVE_TORCH:
        pytest.skip("torch is not installed (pip install -e '.[bench]'): the kernels take "
                    "torch tensors")
    if not _HAVE_TRITON:
        pytest.skip("triton is not installed (it comes with torch's CUDA wheels)")
    launch = triton_launch
    if request.param == "cuda":
        if not _cuda_available():
            pytest.skip("no CUDA GPU here; the same checks run through Triton's interpreter")
        if launch.interpreter_enabled():
            pytest.skip("this process imported triton for its interpreter and cannot compile")
    elif not launch.interpreter_enabled():
        pytest.skip("CUDA is available, so the kernels run compiled; the interpreter runs "
                    "them where no GPU exists" if _cuda_available() else
                    "triton was imported for compilation before tests/gpu/conftest.py could "
                    "enable its interpreter; run tests/gpu in a pytest process of its own")
    return str(request.param)


@pytest.fixture
def launch() -> Any:
    """The launch layer, optimizer/testing/triton_launch.py."""
    return triton_launch


@pytest.fixture
def despecializable(launch: Any, device: str) -> None:
    """For tests of alignment_hints=False: skips where this Triton cannot despecialize."""
    if device == "cuda" and not launch.despecialization_supported():
        pytest.skip("this Triton's jit has no do_not_specialize_on_alignment: the kernels "
                    "cannot be launched as TensorRT's AOT build compiles them")
