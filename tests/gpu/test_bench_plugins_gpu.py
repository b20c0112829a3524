"""bench/plugins_gpu.py runs its correctness part through Triton's interpreter and says so.

In a process of its own (the interpreter must be set up before triton is imported); the GPU
part runs where CUDA exists (scripts/device-check.sh).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The checkout: the subprocesses below import bench.plugins_gpu from it.
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None,
    reason="torch and triton are not installed (pip install -e '.[bench]')")


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "bench.plugins_gpu", *args],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def test_bench_checks_every_kernel_and_dtype_through_the_interpreter(tmp_path: Path) -> None:
    result = run_bench("--interpret", "--quick", "--json", str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["environment"]["device"] == "cpu"
    checks = report["checks"]
    assert checks and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    covered = {(c["kernel"], c["dtype"]) for c in checks}
    assert covered == {(k, d) for k in ("skip_layer_norm", "bias_gelu", "multi_head_attention")
                       for d in ("float32", "float16", "bfloat16")} - {
        ("multi_head_attention", "bfloat16")}  # the interpreter cannot multiply bfloat16
    assert report["timings"] == []  # no speed figures without a GPU


def test_bench_without_cuda_says_so_and_exits_0(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the bench measures instead")
    result = run_bench("--json", str(tmp_path / "out.json"))
    assert result.returncode == 0
    assert "no CUDA device here" in result.stdout
    assert json.loads((tmp_path / "out.json").read_text())["environment"]["device"] is None
