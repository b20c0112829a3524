"""Wall and CPU time of `fuseforge optimize resnet50.onnx -o out.onnx` (and `fuseforge --help`),
this checkout against another one, in interleaved pairs.

The model is optimizer.testing.real_models.resnet50 (random weights, BatchNormalization
unfolded, about 98 MB) at `--opset`, written once to the work folder. Each pair runs both
checkouts' CLI in a fresh process (`python -c 'from fuseforge_cli.main import main; ...'` with
the checkout alone on PYTHONPATH), alternating which goes first; CPU time is the child's user +
system time (resource.getrusage(RUSAGE_CHILDREN)), steadier than wall time on a shared machine.
Each checkout runs once untimed first, which also writes its bytecode caches (an installed CLI
has them; PYTHONDONTWRITEBYTECODE is dropped for the children).

    git worktree add /tmp/base <commit>
    .venv/bin/python -m bench.cli_optimize --base /tmp/base [--pairs 15] [--opset 13]
                                           [--batch N] [--work-dir DIR]

Prints each pair, then medians and the ratio this/base (median of the per-pair ratios: below
1 means this checkout is faster). The machine is shared: read ratios from one run, and look at
the load printed before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import onnx

from optimizer.testing.real_models import resnet50

_THIS = Path(__file__).resolve().parents[1]
_MAIN = "import sys; from fuseforge_cli.main import main; sys.exit(main())"


@dataclass(frozen=True)
class _Run:
    wall_s: float
    cpu_s: float


def _run(tree: Path, argv: list[str]) -> _Run:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MAIN, *argv], env=env, cwd=tree,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: fuseforge {' '.join(argv)} exited {done.returncode}:\n"
                         f"{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return _Run(wall, cpu)


def _model(work: Path, opset: int, batch: str) -> Path:
    path = work / f"resnet50_opset{opset}_batch{batch}.onnx"
    if not path.exists():
        onnx.save(resnet50(batch=int(batch) if batch.isdigit() else batch, opset=opset), path)
    return path


def _pairs(trees: dict[str, Path], argv: list[str], pairs: int, *, show: bool
           ) -> dict[str, list[_Run]]:
    runs: dict[str, list[_Run]] = {name: [] for name in trees}
    names = list(trees)
    for pair in range(pairs):
        order = names if pair % 2 == 0 else names[::-1]
        for name in order:
            runs[name].append(_run(trees[name], argv))
        if show:
            print(f"pair {pair + 1:2d}: " + "  ".join(
                f"{name} {runs[name][-1].wall_s:.2f} s (CPU {runs[name][-1].cpu_s:.2f} s)"
                for name in names), flush=True)
    return runs


def _summary(label: str, runs: dict[str, list[_Run]]) -> None:
    this, base = runs["this"], runs["base"]
    for measure in ("wall_s", "cpu_s"):
        mine = [getattr(run, measure) for run in this]
        theirs = [getattr(run, measure) for run in base]
        ratio = statistics.median(a / b for a, b in zip(mine, theirs, strict=True))
        print(f"{label} {measure[:-2]:>4}: this median {statistics.median(mine):.3f} s "
              f"({min(mine):.2f}-{max(mine):.2f}), base median {statistics.median(theirs):.3f} s "
              f"({min(theirs):.2f}-{max(theirs):.2f}), this/base {ratio:.3f} (n={len(mine)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--help-pairs", type=int, default=5, help="pairs of `fuseforge --help`")
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--batch", default="N", help="the input's batch dim: a name or a size")
    parser.add_argument("--work-dir", type=Path, help="where the model and outputs go "
                        "(default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cli-optimize-") as temporary:
        work = (args.work_dir or Path(temporary)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        model = _model(work, args.opset, args.batch)
        trees = {"this": _THIS, "base": args.base.resolve()}
        optimize = ["optimize", str(model), "-o", str(work / "out.onnx")]
        print(f"model {model} ({model.stat().st_size / 2**20:.0f} MiB); "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        for tree in trees.values():
            _run(tree, optimize)  # untimed: bytecode caches, the file cache
        _summary("--help  ", _pairs(trees, ["--help"], args.help_pairs, show=False))
        _summary("optimize", _pairs(trees, optimize, args.pairs, show=True))
        print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
