"""A user's clone has no ../shared beside it (CI's has): `make check`, which `make test` runs
first, must pass there too, and say which check it skipped for want of the stubs.

The tracked files of this checkout are copied into a temporary folder whose parent holds no
`shared/`, with this checkout's virtualenv linked in (installing another one is `make test`'s own
business, not this test's); then `make check` runs there as a user would run it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def _copy_tracked(into: Path) -> None:
    for name in _tracked_files():
        source = REPO / name
        if not source.is_file():  # deleted in the work tree and not yet committed
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


@pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                    reason=f"no virtualenv at {VENV}: run `make install` first")
@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None,
                    reason="git and make are needed to copy the checkout and run `make check`")
def test_make_check_passes_in_a_clone_with_no_shared_folder(tmp_path: Path) -> None:
    assert not (tmp_path / "shared").exists()
    clone = tmp_path / "fuseforge"
    _copy_tracked(clone)
    (clone / ".venv").symlink_to(VENV)
    environment = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}

    # -o: never install into the linked virtualenv (an editable install would point it here).
    finished = subprocess.run(["make", "-o", ".venv/.installed", "check"], cwd=clone,
                              env=environment, text=True, capture_output=True, timeout=540)

    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output[-6000:]
    assert "Class cannot subclass" not in output
    for version in ("11.4", "10.16"):
        assert f"typecheck-tensorrt: SKIPPED for TensorRT {version}" in output, output[-3000:]
