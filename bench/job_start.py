"""How long a claimed job's process takes to start running the job's code: a fresh interpreter
(the job process as it was) against a fork of the worker's pre-imported template
(worker/supervision/job_template.py), in alternating rounds, printed side by side.

    .venv/bin/python -m bench.job_start [--rounds 7]

Each round starts an isolated child (core/isolation.py's IsolatedChild, as the supervisor does)
that imports worker.supervision.job_process, as a job's process does before its first stage (by
name: bench imports nothing of the worker), and returns the time that was done. What
follows (the job's database engine and store, then the load stage) is the same in both ways and
not timed. The template is started and used once before timing (a worker starts it at start-up).
The machine is shared: the load is printed before and after.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time

from core.isolation import ChildLimits, run_isolated
from core.process_template import ProcessTemplate

_LIMITS = ChildLimits(timeout_s=120)
JOB_MODULE = "worker.supervision.job_process"
# worker/supervision/job_template.py's JOB_PRELOAD (tests/test_bench_job_start.py keeps them equal).
JOB_PRELOAD = ("numpy", "onnx", "onnxruntime", "onnxscript", JOB_MODULE)


def running_since(module: str) -> float:
    """In the child: import the job's code as its process does, and say when that was done."""
    importlib.import_module(module)
    return time.time()


def _start_s(template: ProcessTemplate | None) -> float:
    # By its module's name, not __main__'s: the child imports it as a job's process would.
    probe = importlib.import_module("bench.job_start").running_since
    before = time.time()
    started: float = run_isolated(probe, (JOB_MODULE,), limits=_LIMITS, what="the bench child",
                                  template=template)
    return started - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    template = ProcessTemplate(JOB_PRELOAD)
    try:
        _start_s(template)  # waits for the template's imports, as a worker's start-up does
        fresh, forked = [], []
        for _ in range(args.rounds):
            fresh.append(_start_s(None))
            forked.append(_start_s(template))
    finally:
        template.close()
    print(f"{'round':>5}  {'fresh interpreter':>17}  {'forked template':>15}")
    for number, (a, b) in enumerate(zip(fresh, forked, strict=True), 1):
        print(f"{number:>5}  {a * 1000:>14.0f} ms  {b * 1000:>12.0f} ms")
    print(f"{'median':>5}  {statistics.median(fresh) * 1000:>14.0f} ms  "
          f"{statistics.median(forked) * 1000:>12.0f} ms")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
