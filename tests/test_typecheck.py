"""The code type-checks: mypy with the project's configuration (strict on optimizer/)."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_type_errors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
