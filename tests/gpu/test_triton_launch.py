"""The launch layer's process-level promises: the interpreter is set up only as asked, leaves
no TRITON_INTERPRET behind, and refuses clearly where it cannot work."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The checkout: the subprocesses below import tests.* and bench.* from it.
REPO = Path(__file__).resolve().parents[2]

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")


def test_a_launch_leaves_no_triton_interpret_variable(launch: Any, device: str) -> None:
    """Subprocesses of the suite (workers, CLIs) must not inherit the interpreter."""
    from optimizer.testing.kernel_cases import bias_gelu_inputs

    launch.bias_gelu(**bias_gelu_inputs((2, 64), "float32", device), approximate="none")
    assert "TRITON_INTERPRET" not in os.environ


@needs_triton
def test_enable_interpreter_refuses_once_triton_was_imported_for_compilation() -> None:
    code = ("import triton, sys\n"
            "from optimizer.testing import triton_launch\n"
            "try:\n"
            "    triton_launch.enable_interpreter()\n"
            "except RuntimeError as err:\n"
            "    print(err)\n"
            "    sys.exit(3)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=300)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "before enable_interpreter() ran" in result.stdout


def test_load_plugin_file_names_the_plugins_that_exist(launch: Any) -> None:
    with pytest.raises(FileNotFoundError, match=r"plugins with kernels: \['bias_gelu', "
                       r"'multi_head_attention', 'skip_layer_norm'\]"):
        launch.load_plugin_file("layer_norm", "kernel")


def test_reference_files_load_without_the_plugins_package(launch: Any) -> None:
    """What lets GPU machines without onnx/onnx_ir run the checks: nothing of the optimizer
    beyond the import-light optimizer.testing harness is loaded."""
    code = ("import sys\n"
            "from optimizer.testing.kernel_checks import reference\n"
            "for name in ('skip_layer_norm', 'bias_gelu', 'multi_head_attention'):\n"
            "    reference(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('onnx', 'onnx_ir', 'torch', 'triton') or m.startswith('optimizer.') "
            "and not m.startswith('optimizer.testing')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
