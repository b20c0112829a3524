"""A model over protobuf's 2 GB through `fuseforge optimize` and `fuseforge validate`, and
through the service: the peak memory of each against the size of the model's weights.

The model is built in code (optimizer/testing/block_stack.py: MatMul+Add+LayerNorm blocks of
random fp32 weights) and saved as model.onnx plus model.onnx.data by a process of its own;
each command then runs in a process of its own too, whose peak RSS the kernel reports when it
ends (this one stays small: a child's peak counts what it had before exec).

With `--service`, `fuseforge run` (API, worker, janitor; SQLite and a local artifact folder)
gets the model instead: uploaded as one tar by the client (the API's peak RSS growth over the
upload, from /proc/PID/clear_refs and VmHWM), then a job (onnxruntime, fp32) through fusion,
validation, benchmark and store, whose peak RSS per stage the job records itself.

    .venv/bin/python -m bench.large_model [--gb 2.5] [--hidden 4096] [--service]

Needs free disk of about three times the weights (the model, the optimized model, their data
files; with --service about eight times: the upload, its unpacked copy, each model the job
writes and the stored artifacts) and memory of a few times them. Linux only for --service.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from bench.large_model_service import through_service
from optimizer.testing.block_stack import block_stack, block_weight_bytes

_MB = 2**20


def _build(folder: Path, gigabytes: float, hidden: int) -> None:
    blocks = max(1, math.ceil(gigabytes * 2**30 / block_weight_bytes(hidden)))
    model = block_stack(blocks, hidden=hidden, tokens=8, seed=0)
    path = folder / "model" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")


def _peak_rss_of(command: list[str]) -> tuple[int, float]:
    """Run `command`; its own peak RSS in bytes (wait4 reports that child's alone) and its
    wall time."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:4])} failed with exit code {child.returncode}")
    return usage.ru_maxrss * 1024, time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.5, help="weights, in GiB (default 2.5)")
    parser.add_argument("--hidden", type=int, default=4096, help="block width (default 4096)")
    parser.add_argument("--service", action="store_true",
                        help="upload it to `fuseforge run` and run a job on it instead")
    parser.add_argument("--build-into", type=Path, help=argparse.SUPPRESS)  # the builder child
    args = parser.parse_args(argv)
    if args.build_into is not None:
        _build(args.build_into, args.gb, args.hidden)
        return
    with tempfile.TemporaryDirectory(prefix="fuseforge-large-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bench.large_model", "--gb", str(args.gb),
                        "--hidden", str(args.hidden), "--build-into", str(folder)], check=True)
        model = folder / "model" / "model.onnx"
        weights = (model.parent / "model.onnx.data").stat().st_size
        print(f"model: {weights / _MB:,.0f} MB of fp32 weights in model.onnx.data, "
              f".onnx {model.stat().st_size / 1024:.0f} KB (built in "
              f"{time.perf_counter() - started:.0f} s)", flush=True)
        if args.service:
            through_service(folder, model, weights, args.hidden)
        else:
            _through_cli(folder, model, weights)


def _through_cli(folder: Path, model: Path, weights: int) -> None:
    cli = [sys.executable, "-m", "fuseforge_cli.main"]
    out = folder / "out" / "opt.onnx"
    out.parent.mkdir()
    for name, command in (
            ("optimize", [*cli, "optimize", str(model), "-o", str(out)]),
            ("validate", [*cli, "validate", str(model), str(out), "--samples", "2"])):
        peak, elapsed = _peak_rss_of(command)
        print(f"{name}: peak RSS {peak / _MB:,.0f} MB = {peak / weights:.2f}x the weights, "
              f"{elapsed:.0f} s")
    data = out.with_name("opt.onnx.data")
    print(f"written: opt.onnx {out.stat().st_size / 1024:.0f} KB + opt.onnx.data "
          f"{data.stat().st_size / _MB:,.0f} MB")


if __name__ == "__main__":
    main()
