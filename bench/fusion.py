"""Benchmark FuseForge's fusion passes on full-size models against ONNX Runtime's own fusions.

For each model, one interleaved run times six ONNX Runtime CPU sessions on the same feeds:
the original and our fused model (optimize_model, backend "onnxruntime", every pass that
DEFAULT_PASSES enables) with ORT's graph optimizations disabled, the original at "extended"
and at "all", and the fused model at "all". From the per-round times it prints the median of
per-round ratios for three comparisons:

  passes alone   original@disabled / fused@disabled   what our rewrites buy by themselves
  vs ORT fusions original@extended / fused@disabled   ours against ORT's own fusions
  end to end     original@all      / fused@all        what a user of ORT gets on top
  engine         original@all      / engine           a FuseForge engine: fused, at "all",
                                                      without ORT fusions measured slower

A ratio above 1 means the fused model is faster. The machine is shared and noisy: compare the
ratios of one run, never absolute times across runs. Also printed: node counts (original,
ours, onnxslim's), the time optimize_model takes, and the largest output difference.

    .venv/bin/python -m bench.fusion [--models resnet50,bert] [--rounds 20] [--torch-dir DIR]

Models: resnet50, bert (dynamo form), bert-torchscript, bert-opset20
(optimizer.testing.real_models), and with --torch-dir every .onnx file there (see
bench/models/export_torch.py).
onnxslim is optional (the `bench` extra); without it its column shows "-".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.backends.onnxruntime.build import SLOWER_ORT_FUSIONS
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner, OptimizationLevel
from optimizer.backends.runner import RunnerSpec
from optimizer.errors import OptimizerError
from optimizer.measure.benchmark import BenchmarkOptions, benchmark_interleaved
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import TensorSpec, summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.registries.backends import Backend
from optimizer.testing.real_models import bert_encoder, resnet50

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": resnet50,
    "bert": lambda: bert_encoder(form="dynamo"),
    "bert-torchscript": lambda: bert_encoder(form="torchscript"),
    "bert-opset20": lambda: bert_encoder(form="dynamo_opset20"),
}
# (variant, model, ORT level, ORT optimizers kept off)
VARIANTS: tuple[tuple[str, str, OptimizationLevel, tuple[str, ...]], ...] = (
    ("original@disabled", "original", "disabled", ()),
    ("fused@disabled", "fused", "disabled", ()),
    ("original@extended", "original", "extended", ()),
    ("original@all", "original", "all", ()),
    ("fused@all", "fused", "all", ()),
    # What a FuseForge job's engine runs: the fused model at "all" without the ORT fusions
    # measured slower (optimizer.backends.onnxruntime.build.SLOWER_ORT_FUSIONS).
    ("engine", "fused", "all", tuple(SLOWER_ORT_FUSIONS)),
)
# (column, baseline variant, fused variant)
RATIOS = (
    ("passes alone", "original@disabled", "fused@disabled"),
    ("vs ORT fusions", "original@extended", "fused@disabled"),
    ("end to end", "original@all", "fused@all"),
    ("engine", "original@all", "engine"),
)


class _TimedRunner:
    """Wraps a runner and keeps every infer's wall time, so any two variants pair by round."""

    def __init__(self, runner: OnnxRuntimeRunner) -> None:
        self.runner = runner
        self.times_ns: list[int] = []

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.runner.inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.runner.output_names

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        start = time.perf_counter_ns()
        outputs = self.runner.infer(feeds)
        self.times_ns.append(time.perf_counter_ns() - start)
        return outputs

    def spec(self) -> RunnerSpec:
        return self.runner.spec()

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Batch-1 feeds: token ids below the vocabulary, an additive mask hiding the last quarter."""
    rng = np.random.default_rng(seed)
    initializers = {t.name: t for t in model.graph.initializer}
    # An integer input indexes an embedding table: ids must stay below its row count.
    rows = {node.input[1]: initializers[node.input[0]].dims[0] for node in model.graph.node
            if node.op_type == "Gather" and node.input[0] in initializers}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if value.name == "attention_mask":
            mask = np.zeros(shape, dtype)
            mask[..., shape[-1] * 3 // 4:] = -10000.0
            feeds[value.name] = mask
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, rows.get(value.name, 2), shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _slim_node_count(model: onnx.ModelProto) -> str:
    try:
        import onnxslim
    except ImportError:
        return "-"
    with contextlib.redirect_stdout(io.StringIO()):
        slimmed = onnxslim.slim(model)
    return str(len(slimmed.graph.node))


def _median_ratio(baseline: list[int], fused: list[int]) -> float:
    base, ours = np.array(baseline, dtype=np.float64), np.array(fused, dtype=np.float64)
    return float(np.median(base / np.maximum(ours, 1.0)))


def bench_model(name: str, model: onnx.ModelProto, options: BenchmarkOptions,
                threads: int | None) -> list[str]:
    """One table row: node counts, optimize time, the three ratios and the output difference."""
    # As a job does: dynamic dims fixed (to 1) and shapes inferred before the passes run.
    model = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))
    started = time.perf_counter()
    fused, report = optimize_model(model, OptimizeOptions(backend="onnxruntime", passes="all"))
    optimize_s = time.perf_counter() - started
    feeds = feeds_for(model)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"original": Path(tmp) / "original.onnx", "fused": Path(tmp) / "fused.onnx"}
        onnx.save(model, paths["original"])
        onnx.save(fused, paths["fused"])
        runners = {variant: _TimedRunner(OnnxRuntimeRunner(paths[which], optimization_level=level,
                                                           intra_op_threads=threads,
                                                           disabled_optimizers=disabled))
                   for variant, which, level, disabled in VARIANTS}
        try:
            benchmark_interleaved(runners, feeds, options, reference="original@disabled",
                                  batch_size=1)
            want = runners["original@disabled"].infer(feeds)
            got = runners["fused@disabled"].infer(feeds)
        finally:
            for runner in runners.values():
                runner.close()
    rounds = {variant: runner.times_ns[options.warmup:options.warmup + options.iterations]
              for variant, runner in runners.items()}
    diff = max(float(np.max(np.abs(want[k].astype(np.float64) - got[k]))) for k in want)
    base_ms = float(np.median(rounds["original@disabled"])) / 1e6
    ratios = [f"{_median_ratio(rounds[base], rounds[ours]):.2f}x" for _, base, ours in RATIOS]
    return [name, str(report.nodes_before), str(report.nodes_after), _slim_node_count(model),
            f"{optimize_s:.2f}", f"{base_ms:.1f}", *ratios, f"{diff:.1e}"]


def _print_table(rows: list[list[str]]) -> None:
    header = ["model", "nodes", "ours", "onnxslim", "optimize s", "orig ms",
              *(column for column, _, _ in RATIOS), "max |diff|"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def _models(names: list[str], torch_dir: Path | None) -> list[tuple[str, onnx.ModelProto]]:
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(BUILDERS)}")
    models = [(name, BUILDERS[name]()) for name in names]
    if torch_dir is not None:
        files = sorted(torch_dir.glob("*.onnx"))
        if not files:
            raise SystemExit(f"no .onnx files in {torch_dir}; run bench/models/export_torch.py")
        # onnx.load reads external data (the dynamo exporter's .onnx.data) from beside the file.
        models += [(f"torch:{path.stem}", onnx.load(path)) for path in files]
    return models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert",
                        help=f"comma-separated, from {', '.join(BUILDERS)}")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="ORT intra-op threads (1 keeps a shared machine's noise down; "
                             "0 lets ORT choose)")
    parser.add_argument("--torch-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    # max_warmup = warmup: exactly that many warm-up runs, so the rounds start where _measure
    # slices the recorded times
    options = BenchmarkOptions(warmup=args.warmup, iterations=args.rounds, measure_memory=False,
                               max_warmup=args.warmup)
    threads = args.threads or None
    # The fused model's unused initializers make ORT warn once per tensor at load; errors only.
    ort.set_default_logger_severity(3)
    models = _models([n for n in args.models.split(",") if n], args.torch_dir)
    enabled = [p.name for p in DEFAULT_PASSES if Backend.ONNXRUNTIME not in p.off_by_default]
    off = [p.name for p in DEFAULT_PASSES if Backend.ONNXRUNTIME in p.off_by_default]
    print(f"Fusion benchmark: ONNX Runtime CPU, batch 1, {args.rounds} interleaved rounds, "
          f"{args.warmup} warm-up runs, {threads or 'default'} intra-op thread(s).")
    print("Compare the RATIOS (median of per-round baseline/fused; >1 = fused faster), not "
          "absolute times:")
    for column, base, ours in RATIOS:
        print(f"  {column:<15} {base} / {ours}")
    print(f"Passes: {', '.join(enabled) or 'none'}"
          + (f"; off by default on onnxruntime: {', '.join(off)}" if off else ""))
    print()
    rows, failures = [], []
    for name, model in models:
        try:
            rows.append(bench_model(name, model, options, threads))
        except OptimizerError as err:
            # One model's failure (a pass that refuses to load, say) must not hide the others.
            failures.append(f"{name}: {type(err).__name__}: {err}")
        print(f"  done: {name}", file=sys.stderr)
    if rows:
        _print_table(rows)
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
