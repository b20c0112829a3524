"""scripts/check_registry_names.py: a backend or precision member named outside its registry, pass
declarations and its backend's own files fails `make lint`, naming the file and line; a new
backend's own package and module pass without an edit to the script; this tree passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_registry_names.py"

# A registry declaring one backend more than today's, as a merged plug-in's would.
REGISTRY = '''
from enum import StrEnum

class Backend(StrEnum):
    ONNXRUNTIME = "onnxruntime"
    TENSORRT = "tensorrt"
    OPENVINO = "openvino"
    STAND_IN = "stand-in"

DEFAULT_BACKEND = Backend.ONNXRUNTIME
'''


def plant(root: Path, files: dict[str, str]) -> Path:
    """A source tree at `root` holding `files` (paths relative to it) and the registry above."""
    for relative, text in {"optimizer/registries/backends.py": REGISTRY, **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True,
                          text=True, check=False, timeout=120)


def test_a_precision_branch_in_a_stage_fails_naming_its_file_and_line(tmp_path: Path) -> None:
    root = plant(tmp_path, {"worker/pipeline/steps/quantize.py": (
        "from optimizer.registries.precisions import Precision\n"
        "\n"
        "def allow_dynamic(precision):\n"
        "    return precision == Precision.INT8\n")})

    result = check(root)

    assert result.returncode == 1, result.stdout
    assert result.stdout.splitlines()[0] == (
        "worker/pipeline/steps/quantize.py:4: names Precision.INT8 outside its registry, pass "
        "declarations and its backend's own files")


@pytest.mark.parametrize(("relative", "text", "member"), [
    ("core/job_config.py", "from optimizer.registries.backends import Backend as B\n"
                           "DEFAULT = B.ONNXRUNTIME\n", "Backend.ONNXRUNTIME"),
    ("api/routes/x.py", "import optimizer.registries.backends as backends\n"
                        "X = backends.Backend.TENSORRT\n", "Backend.TENSORRT"),
    ("optimizer/quantization/quantize.py",
     "from optimizer.registries.quantization import QuantFlavour\n"
     "FP8 = QuantFlavour.TENSORRT_FP8\n", "QuantFlavour.TENSORRT_FP8"),
    # A backend's own files name no other backend, and a shared module beside them is no one's.
    ("optimizer/backends/tensorrt/build.py", "from optimizer.registries.backends import Backend\n"
                                             "X = Backend.ONNXRUNTIME\n", "Backend.ONNXRUNTIME"),
    ("worker/pipeline/backends/base.py", "from optimizer.registries.precisions import Precision\n"
                                         "X = Precision.FP16\n", "Precision.FP16"),
    ("worker/pipeline/backends/trt_profile.py",
     "from optimizer.registries.backends import Backend\nX = Backend.TENSORRT\n",
     "Backend.TENSORRT"),
])
def test_each_spelling_and_place_is_found(tmp_path: Path, relative: str, text: str,
                                          member: str) -> None:
    result = check(plant(tmp_path, {relative: text}))

    assert result.returncode == 1
    assert result.stdout.startswith(f"{relative}:2: names {member} outside its registry")


def test_registries_pass_declarations_and_each_backends_own_files_pass(tmp_path: Path) -> None:
    uses = ("from optimizer.registries.backends import Backend\n"
            "from optimizer.registries.precisions import Precision\n")
    root = plant(tmp_path, {
        "optimizer/registries/precisions.py": "X = Precision.FP8\n",
        "worker/pipeline/backends/registry.py": uses + "X = {Backend.TENSORRT: 1}\n",
        "optimizer/passes/fuse_gelu.py": uses + "RULES = {Backend.TENSORRT: []}\n",
        "optimizer/backends/tensorrt/model_precision.py": uses + "X = Precision.FP8\n",
        # A new backend: its package, its strategy module and a helper named for it.
        "optimizer/backends/openvino/build.py": uses + "X = (Backend.OPENVINO, Precision.BF16)\n",
        "worker/pipeline/backends/openvino.py": uses + "name = Backend.OPENVINO\n",
        "worker/pipeline/backends/openvino_profile.py": uses + "X = Backend.OPENVINO\n",
        "worker/pipeline/backends/stand_in.py": uses + "name = Backend.STAND_IN\n",
        # Tests and benches are not product code.
        "tests/test_x.py": uses + "X = Backend.TENSORRT\n",
        "bench/x.py": uses + "X = Precision.INT8\n",
        # Methods and dunders of the enums are not members.
        "core/x.py": uses + "X = list(Backend.__members__), Precision.values\n",
    })

    result = check(root)

    assert result.returncode == 0, result.stdout
    assert result.stdout == ""


def test_this_tree_passes() -> None:
    result = check(ROOT)

    assert result.returncode == 0, result.stdout
