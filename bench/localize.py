"""Time and peak memory of divergence localisation on ResNet-50 and a BERT-style encoder.

Each model (optimizer.testing.real_models, random weights) is optimized with every default pass;
the "fault" candidate then has one fused node near the middle of the graph made wrong (noise on
its bias, or its last weight), the "clean" candidate is the correct fusion, where nothing
diverges and every chunk is read (the worst case for time). Each localisation runs in a fresh
child process that loads both models from disk, resets its RSS high-water mark
(/proc/self/clear_refs), localises, and reports:

  time         wall time of localize_divergence (both models run once per chunk per feed)
  peak MiB     the process's RSS high-water mark during localisation (VmHWM)
  added MiB    that peak minus the RSS just before (the two models and ORT already loaded)
  named        whether the localiser named the planted node (fault runs only)

    .venv/bin/python -m bench.localize [--models resnet50,bert] [--chunk-sizes 8,64]
                                       [--samples 2] [--bert-layers 2] [--bert-hidden 256]

The defaults are the models bench/fusion.py and the tests use; `--models bert --bert-layers 12
--bert-hidden 768` gives a BERT-base-sized encoder (sequence 128 throughout).

The machine is shared: times vary between runs, memory much less so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnxscript.rewriter import RULE_NAME_TAG

from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.testing.real_models import bert_encoder, resnet50
from optimizer.validation.localize import localize_divergence, shared_tensors
from optimizer.validation.tolerances import default_tolerances

_ROOT = Path(__file__).resolve().parent.parent
_SEQ = 128
Feeds = list[dict[str, np.ndarray]]


def _resnet_feeds(rng: np.random.Generator, samples: int) -> Feeds:
    return [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
            for _ in range(samples)]


def _bert_feeds(rng: np.random.Generator, samples: int) -> Feeds:
    feeds: Feeds = []
    for _ in range(samples):
        mask = np.zeros((1, 1, 1, _SEQ), np.float32)
        mask[..., rng.integers(_SEQ // 2, _SEQ):] = -10000.0  # padding at the end
        feeds.append({"input_ids": rng.integers(0, 1000, (1, _SEQ)).astype(np.int64),
                      "attention_mask": mask})
    return feeds


def _models(bert_layers: int, bert_hidden: int) -> dict[
        str, tuple[Callable[[], onnx.ModelProto], Callable[[np.random.Generator, int], Feeds]]]:
    return {
        "resnet50": (lambda: resnet50(batch=1), _resnet_feeds),
        "bert": (lambda: bert_encoder(layers=bert_layers, hidden=bert_hidden,
                                      heads=bert_hidden // 64, seq=_SEQ), _bert_feeds),
    }


def plant_fault(fused: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """A copy of `fused` whose rewritten node nearest the middle has noise on its last weight
    (the bias where there is one), and that node's name."""
    weights = {t.name: t for t in fused.graph.initializer}
    nodes = list(fused.graph.node)
    candidates = [i for i, node in enumerate(nodes)
                  if any(p.key == RULE_NAME_TAG for p in node.metadata_props)
                  and any(name in weights for name in node.input)]
    middle = min(candidates, key=lambda i: abs(i - len(nodes) // 2))
    node = nodes[middle]
    name = [name for name in node.input if name in weights][-1]
    broken = onnx.ModelProto()
    broken.CopyFrom(fused)
    (tensor,) = [t for t in broken.graph.initializer if t.name == name]
    values = numpy_helper.to_array(tensor)
    noise = np.random.default_rng(0).normal(0, 0.05 * float(np.std(values)) + 1e-2, values.shape)
    tensor.CopyFrom(numpy_helper.from_array((values + noise).astype(values.dtype), name))
    return broken, node.name


def _child(original_path: str, candidate_path: str, feeds_path: str, chunk_size: int) -> None:
    original, candidate = onnx.load(original_path), onnx.load(candidate_path)
    with np.load(feeds_path) as stored:
        names = json.loads(str(stored["__names__"]))
        count = int(stored["__count__"])
        feeds = [{name: stored[f"{i}/{name}"] for name in names} for i in range(count)]
    baseline = _status_kib("VmRSS")
    clear = Path("/proc/self/clear_refs")
    reset = True
    try:
        clear.write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        reset = False
    started = time.perf_counter()
    divergence = localize_divergence(original, candidate, feeds, default_tolerances("fp32"),
                                     chunk_size=chunk_size)
    elapsed = time.perf_counter() - started
    peak = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "seconds": elapsed, "peak_mib": peak / 1024, "added_mib": (peak - baseline) / 1024,
        "node": divergence.node if divergence else None,
        "rules": list(divergence.rules) if divergence else [],
        "peak_is_process_lifetime": not reset,
    }))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _measure(paths: tuple[Path, Path, Path], chunk_size: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.localize", "--child", *map(str, paths), str(chunk_size)],
        capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"localisation child failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--chunk-sizes", default="8,64")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--bert-layers", type=int, default=2)
    parser.add_argument("--bert-hidden", type=int, default=256, help="heads: hidden / 64")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        original_path, candidate_path, feeds_path, chunk_size = args.child
        _child(original_path, candidate_path, feeds_path, int(chunk_size))
        return 0
    builders = _models(args.bert_layers, args.bert_hidden)
    chunk_sizes = [int(size) for size in args.chunk_sizes.split(",")]
    header = ["model", "case", "chunk", "shared", "time s", "peak MiB", "added MiB", "named"]
    rows = []
    for model_name in args.models.split(","):
        build, make_feeds = builders[model_name]
        original = build()
        fused, _ = optimize_model(original, OptimizeOptions())
        broken, planted = plant_fault(fused)
        feeds = make_feeds(np.random.default_rng(0), args.samples)
        shared = len(shared_tensors(original, fused))
        with tempfile.TemporaryDirectory(prefix="fuseforge-bench-localize-") as tmp:
            root = Path(tmp)
            onnx.save(original, root / "original.onnx")
            onnx.save(fused, root / "clean.onnx")
            onnx.save(broken, root / "fault.onnx")
            arrays: dict[str, Any] = {f"{i}/{name}": value for i, feed in enumerate(feeds)
                                      for name, value in feed.items()}
            arrays["__names__"] = np.array(json.dumps(list(feeds[0])))
            arrays["__count__"] = np.array(len(feeds))
            np.savez(root / "feeds.npz", **arrays)
            del original, fused, broken
            print(f"{model_name}: {shared} shared tensors, planted fault in {planted!r}",
                  flush=True)
            for case in ("fault", "clean"):
                for size in chunk_sizes:
                    paths = (root / "original.onnx", root / f"{case}.onnx", root / "feeds.npz")
                    result = _measure(paths, size)
                    named = ("-" if case == "clean" and result["node"] is None
                             else "yes" if result["node"] == planted and case == "fault"
                             else f"NO ({result['node']})")
                    rows.append([model_name, case, str(size), str(shared),
                                 f"{result['seconds']:.2f}", f"{result['peak_mib']:.0f}",
                                 f"{result['added_mib']:.0f}", named])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    print(f"({args.samples} samples per localisation; peak = RSS high-water mark of a fresh "
          "process during localisation, added = peak minus RSS just before it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
