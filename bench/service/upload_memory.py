"""How much memory the API process takes on for large uploads, which it must not hold.

Starts `fuseforge serve` on a fresh data folder and, per case, resets the process's peak
resident memory (/proc/PID/clear_refs), uploads, and prints the peak's growth over the resident
memory before, with the answer's status and the time taken:

- a valid ONNX model of `--model-mb` (one large initializer);
- `--junk-mb` of random bytes (refused as not an ONNX model);
- `--concurrent` valid models of `--concurrent-mb` each, uploaded at once.

    .venv/bin/python -m bench.service.upload_memory [--model-mb 500 --junk-mb 2000]

The model check runs in a process of its own, whose memory is not the API's (it is bounded by
FUSEFORGE_MODEL_CHECK__MAX_RSS_GIB). Linux only (it reads /proc); run as the API's user or root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import onnx

from bench.service.stack import FUSEFORGE, free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from optimizer.testing.models import large_model

_MIB = 2**20


def _model_file(path: Path, megabytes: int, seed: int) -> Path:
    """A valid model of about `megabytes` MB (random weights), saved at `path`."""
    onnx.save(large_model(megabytes, seed), path)
    return path


def _junk_file(path: Path, megabytes: int) -> Path:
    with path.open("wb") as handle:
        for _ in range(megabytes):
            handle.write(os.urandom(_MIB))
    return path


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _upload(base_url: str, path: Path) -> int:
    with path.open("rb") as handle:
        return httpx.post(f"{base_url}/v1/models", params={"name": path.name}, content=handle,
                          headers={"Content-Type": "application/octet-stream"},
                          timeout=1800).status_code


def _measure(pid: int, label: str, work: object) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_kib(pid, "VmRSS")
    started = time.monotonic()
    statuses = work()  # type: ignore[operator]
    took = time.monotonic() - started
    growth_mb = (_status_kib(pid, "VmHWM") - before) / 1024
    print(f"{label:<42} API peak +{growth_mb:7.1f} MB  answers {statuses}  {took:6.1f} s",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-mb", type=int, default=500)
    parser.add_argument("--junk-mb", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--concurrent-mb", type=int, default=200)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-uploads-"))
    port = free_port()
    env = fuseforge_env(folder / "data", port, FUSEFORGE_MAX_UPLOAD_BYTES=str(4 * 2**30))
    subprocess.run([*FUSEFORGE, "migrate"], env=env, check=True, capture_output=True)
    api = start_fuseforge("serve", env, folder / "api.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{base_url}/healthz", api, timeout_s=120)
        inputs = folder / "inputs"
        inputs.mkdir()
        _upload(base_url, _model_file(inputs / "warm-up.onnx", 1, seed=0))
        model = _model_file(inputs / "big.onnx", args.model_mb, seed=1)
        _measure(api.pid, f"{args.model_mb} MB valid model", lambda: [_upload(base_url, model)])
        model.unlink()
        junk = _junk_file(inputs / "junk.onnx", args.junk_mb)
        _measure(api.pid, f"{args.junk_mb} MB of random bytes", lambda: [_upload(base_url, junk)])
        junk.unlink()
        many = [_model_file(inputs / f"m{i}.onnx", args.concurrent_mb, seed=10 + i)
                for i in range(args.concurrent)]

        def upload_all() -> list[int]:
            with ThreadPoolExecutor(max_workers=len(many)) as pool:
                return sorted(set(pool.map(lambda p: _upload(base_url, p), many)))

        _measure(api.pid, f"{args.concurrent} × {args.concurrent_mb} MB models at once",
                 upload_all)
    finally:
        stop(api, timeout_s=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
