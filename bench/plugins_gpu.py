"""Check the plugins' Triton kernels against their numpy references and time them on a GPU.

    python -m bench.plugins_gpu [--quick] [--json OUT] [--interpret]

1. Correctness: every kernel (SkipLayerNorm, BiasGelu, MultiHeadAttention) in float32, float16
   and bfloat16, at a few shapes (non-power-of-two sizes, ragged tiles, masks), against its
   numpy reference, launched as TensorRT launches it (optimizer/testing/triton_launch.py), with
   Triton's JIT alignment hints and, at the first two shapes, without them (as TensorRT's AOT
   build compiles it).
   Tolerances are optimizer/testing/kernel_checks.py's. Any failure makes the exit status 1.
2. Speed (CUDA only), CUDA events, median of --reps after warm-up, L2 flushed before each run:
   - SkipLayerNorm at 65536 x 1024 and BiasGelu at 65536 x 1024 and 65536 x 4096 (BERT-large's
     hidden and feed-forward sizes): effective bandwidth (the bytes the op must read and write
     / time) against torch's device-to-device copy of as many bytes, measured in the same run,
     and the speed-up over the eager PyTorch composition (x + skip + bias then F.layer_norm;
     the bias add then F.gelu). Targets: >= 70% of the copy's bandwidth and >= 1.5x eager.
   - MultiHeadAttention at batch 32 x 16 heads x head 64, sequence 128 and 512, with a key
     padding mask: TFLOP/s and the speed-up over eager attention (softmax(q kᵀ * scale + bias)
     v with the head split and merge) and over F.scaled_dot_product_attention. No target.
   The outputs at these sizes are also checked against the eager result computed in float32.
Prints a table with PASS/FAIL per target; --json writes everything (rewritten after each part,
so a run cut short still leaves its results). Without CUDA it says so and exits 0; with
--interpret it runs part 1 on the CPU through Triton's interpreter instead (small sizes,
bfloat16 attention excluded: the interpreter cannot multiply bfloat16).

Needs numpy, torch and triton only (not this project's dependencies): run from the repository
root, with PYTHONPATH=. where the project is not installed.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.plugins_gpu_checks import check_correctness
from bench.plugins_gpu_report import Report, summarize
from bench.plugins_gpu_speed import measure_speed
from optimizer.testing import triton_launch


def environment(device: str) -> dict[str, Any]:
    import numpy
    import torch
    import triton

    found: dict[str, Any] = {"device": device, "python": platform.python_version(),
                             "numpy": numpy.__version__, "torch": torch.__version__,
                             "triton": triton.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        found.update(gpu=properties.name, capability=list(torch.cuda.get_device_capability(0)),
                     memory_gib=round(properties.total_memory / 2**30, 1))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer correctness shapes; speed in float16 only, fewer runs")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--interpret", action="store_true",
                        help="without CUDA: the correctness checks on the CPU, through "
                             "Triton's interpreter")
    parser.add_argument("--reps", type=int, help="timed runs per measurement (default 30, "
                        "10 with --quick)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    launch = triton_launch
    if args.interpret:
        launch.enable_interpreter()  # before anything imports triton for compilation
    import torch

    report = Report()
    if args.interpret and torch.cuda.is_available():
        print("--interpret runs the kernels on the CPU even though CUDA is available",
              flush=True)
    if not args.interpret and not torch.cuda.is_available():
        print("no CUDA device here: nothing to check or time (--interpret runs the "
              "correctness checks on the CPU through Triton's interpreter)")
        report.environment = {"device": None, "python": platform.python_version(),
                              "torch": torch.__version__}
        report.write(args.json)
        return 0
    device = "cpu" if args.interpret else "cuda"
    report.environment = environment(device)
    print(json.dumps(report.environment), flush=True)
    check_correctness(report, device, args.quick)
    report.seconds = time.monotonic() - started
    report.write(args.json)
    if device == "cuda":
        reps = args.reps or (10 if args.quick else 30)
        measure_speed(report, quick=args.quick, reps=reps, warmup=3, json_path=args.json)
    report.seconds = time.monotonic() - started
    report.write(args.json)
    summarize(report)
    return 1 if report.failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
