"""Measure a runner's peak memory in a fresh child process, so other runners do not blur it.

The parent calls `measure_peak_memory_mb`; the child is `python -m optimizer.measure.memory_probe`.
A subprocess, not multiprocessing: the caller may itself be a daemonic process (a worker pool's
child), which multiprocessing forbids to start children, and a fresh interpreter starts from a
clean heap.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from optimizer.backends.runner import RunnerSpec, runner_class, runner_from_spec
from optimizer.errors import InternalError, OptimizerError

__all__ = ["measure_peak_memory_mb", "main"]

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def measure_peak_memory_mb(spec: RunnerSpec, feeds: Mapping[str, np.ndarray], *,
                           iterations: int = 3, timeout_s: float = 600.0) -> float:
    """Peak resident memory, in MiB, that creating the runner and running `feeds` adds.

    Measured in a child process as the peak RSS (getrusage) minus the RSS just before the
    runner is created, after the backend's libraries are imported.

    Raises:
        InternalError: the child fails, times out or prints no result (stderr is included).
    """
    with tempfile.TemporaryDirectory(prefix="fuseforge-memory-probe-") as tmp:
        request_path, feeds_path = Path(tmp) / "request.json", Path(tmp) / "feeds.npz"
        names = list(feeds)
        # Stored positionally (arr_0, arr_1...): feed names may not be safe zip entry names.
        np.savez(feeds_path, *(np.asarray(feeds[name]) for name in names))
        request_path.write_text(json.dumps(
            {"spec": spec.to_dict(), "feed_names": names, "iterations": iterations}))
        env = dict(os.environ)
        # The child must import this package even when the caller's cwd is elsewhere.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-m", "optimizer.measure.memory_probe", str(request_path),
                   str(feeds_path)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as err:
            raise InternalError(
                f"Memory probe for {spec.model_path!r} took longer than {timeout_s:g} s.") from err
    if done.returncode != 0:
        raise InternalError(
            f"Memory probe for {spec.model_path!r} exited with status {done.returncode}: "
            f"{done.stderr.strip()[-2000:]}")
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
        return float(result["peak_rss_increase_mb"])
    except (IndexError, ValueError, KeyError, TypeError) as err:
        raise InternalError(
            f"Memory probe for {spec.model_path!r} printed no result: stdout "
            f"{done.stdout[-500:]!r}, stderr {done.stderr[-1500:]!r}") from err


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: load the runner, run the feeds, print the measurement as JSON."""
    parser = argparse.ArgumentParser(prog="python -m optimizer.measure.memory_probe")
    parser.add_argument("request", type=Path, help="JSON: spec, feed_names, iterations")
    parser.add_argument("feeds", type=Path, help=".npz: arr_0, arr_1... in feed_names order")
    args = parser.parse_args(argv)
    request = json.loads(args.request.read_text())
    spec = RunnerSpec.from_dict(request["spec"])
    with np.load(args.feeds, allow_pickle=False) as data:
        feeds = {name: data[f"arr_{i}"] for i, name in enumerate(request["feed_names"])}
    try:
        runner_class(spec)  # import the backend first so its libraries are not counted
        baseline_kib = _current_rss_kib()
        with runner_from_spec(spec) as runner:
            for _ in range(max(1, int(request["iterations"]))):
                runner.infer(feeds)
        peak_kib = _peak_rss_kib()
    except (OptimizerError, InternalError) as err:
        # Our errors already say what went wrong; the parent quotes stderr in its own error.
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(json.dumps({
        "baseline_rss_mb": baseline_kib / 1024,
        "peak_rss_mb": peak_kib / 1024,
        "peak_rss_increase_mb": max(0, peak_kib - baseline_kib) / 1024,
    }))
    return 0


def _current_rss_kib() -> float:
    try:
        # statm: size resident shared ... counted in pages.
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 1024
    except (OSError, ValueError, IndexError):
        return _peak_rss_kib()  # no /proc: the peak so far is the best baseline available


def _peak_rss_kib() -> float:
    # VmHWM is this process image's own high-water mark. ru_maxrss is not: Linux carries the
    # pre-exec image's peak across execve, so a child of a large worker would report the
    # worker's size (measured: 1.2 GiB "used" by a 1 MiB model started from pytest).
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1])  # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        pass  # no /proc (not Linux): ru_maxrss, without the exec caveat there
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is KiB on Linux but bytes on macOS.
    return peak / 1024 if sys.platform == "darwin" else float(peak)


if __name__ == "__main__":
    sys.exit(main())
