"""The TensorRT backend type-checks (mypy --strict) against the TensorRT 11.4 and 10.16 stubs.

TensorRT cannot be installed on these machines, so the stubs generated from the real wheels
(../shared/tensorrt-stubs/, see its README.md and API-NOTES.md) stand in for it: mypy then
flags calls that do not exist in a version (e.g. BuilderFlag.FP16 on 11.x) or wrong
signatures. Skips, saying so, where ../shared is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
STUBS = REPO_ROOT.parent / "shared" / "tensorrt-stubs"
# The TensorRT backend and the plugins' TensorRT registrations (the plugin API is typed too).
CHECKED = [
    "optimizer/backends/tensorrt",
    "optimizer/plugins/bias_gelu/trt_registration.py",
    "optimizer/plugins/multi_head_attention/trt_registration.py",
    "optimizer/plugins/skip_layer_norm/trt_registration.py",
    "optimizer/plugins/trt_aot.py",
    "optimizer/plugins/trt_registry.py",
]


@pytest.mark.parametrize("version", ["11.4", "10.16"])
def test_tensorrt_backend_type_checks_against_the_stubs(version: str) -> None:
    stubs = STUBS / version
    if not (stubs / "tensorrt" / "__init__.pyi").is_file():
        pytest.skip(f"TensorRT {version} stubs not found at {stubs}; the TensorRT type check "
                    "skips (they live in ../shared/tensorrt-stubs/)")
    env = {**os.environ, "MYPYPATH": str(stubs)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict",
         "--cache-dir", str(REPO_ROOT / ".mypy_cache" / f"tensorrt-{version}"), *CHECKED],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
