"""Do FuseForge's fusion passes help an OpenVINO engine? Each pass family that fires, measured
(issue 46).

For each model, the IR of the model with every pass that runs on backend "openvino" ("all"),
with none, and with each firing pass left out, all compiled by OpenVINO's CPU plugin at f32
(INFERENCE_PRECISION_HINT forced) and timed interleaved in this one process against "none"
(optimizer/measure/interleaved.py: a variant's figure is the median over rounds of its time
over the baseline's in the same round, with the bootstrap interval), at 1 and 2 threads. A
ratio below 1 means the passes made OpenVINO faster; "without X" above "all" means X helps.

Models: PP-OCRv5's detector and recognizer (bench/openvino_baseline.py's wheels and shapes) and
a BERT-style encoder built in code (optimizer/testing/block_stack.py: LayerNorm, GELU, attention
as the exporters write them).

    .venv/bin/python -m bench.openvino_passes [--models ppocr-det-v5,ppocr-rec-v5,encoder]
        [--threads 1,2] [--rounds 9] [--cache ~/.cache/fuseforge]

The machine is shared and noisy: compare ratios from one run, never absolute times across runs.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import onnx

from bench.openvino_baseline import MODELS, _fixed_model
from optimizer.backends.openvino.runner import OpenVinoRunner
from optimizer.measure.interleaved import interleaved_call_ratios
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.registries.backends import Backend
from optimizer.testing.block_stack import block_stack

__all__ = ["main"]

BACKEND = Backend.OPENVINO


def _models(names: list[str], cache: Path, work: Path) -> list[tuple[str, onnx.ModelProto]]:
    chosen = []
    for name in names:
        if name == "encoder":
            chosen.append((name, block_stack(blocks=4, hidden=256, tokens=128)))
            continue
        spec = next((m for m in MODELS if m[0] == name), None)
        if spec is None:
            raise SystemExit(f"unknown model {name!r}; choose from encoder, "
                             f"{', '.join(m[0] for m in MODELS)}")
        chosen.append((name, _fixed_model(name, spec[1], spec[2], cache, work)[1]))
    return chosen


def _variants(model: onnx.ModelProto) -> list[tuple[str, onnx.ModelProto]]:
    """"none", "all", and "without <pass>" for each pass that changed the model."""
    runnable = [p.name for p in DEFAULT_PASSES if p.supports(BACKEND)]
    fused, report = optimize_model(model, OptimizeOptions(backend=BACKEND, passes="all"))
    firing = [name for name in runnable if report.applied(name) and name != "cleanup"]
    variants = [("none", optimize_model(model, OptimizeOptions(backend=BACKEND,
                                                                passes="none"))[0]),
                ("all", fused)]
    for name in firing:
        kept = [p for p in runnable if p != name]
        variants.append((f"without {name}",
                         optimize_model(model, OptimizeOptions(backend=BACKEND, passes=kept))[0]))
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ppocr-det-v5,ppocr-rec-v5,encoder")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fuseforge")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    print("| model | variant | threads | time / none | interval |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ov-passes-") as folder:
        work = Path(folder)
        for name, model in _models(args.models.split(","), args.cache, work):
            feed = random_feeds(summarize_model(model).inputs, count=1, seed=0)[0]
            variants = _variants(model)
            paths = []
            for label, variant in variants:
                path = work / f"{name}-{label.replace(' ', '-')}.onnx"
                onnx.save(variant, path)
                paths.append((label, path))
            for count in threads:
                runners = [OpenVinoRunner(path, inference_precision="f32", threads=count)
                           for _, path in paths]
                runs: list[Callable[[], object]] = [partial(r.infer, feed) for r in runners]
                ratios = interleaved_call_ratios(runs, rounds=args.rounds)
                for (label, _), ratio in zip(paths, ratios, strict=True):
                    print(f"| {name} | {label} | {count} | {ratio.ratio:.3f} | "
                          f"{ratio.ratio_low:.3f}-{ratio.ratio_high:.3f} |", flush=True)
                for runner in runners:
                    runner.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
