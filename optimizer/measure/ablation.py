"""Ablation: benchmark fusion stages cumulatively, the way a fusion study reports them.

Variants: no passes → clean-up + Conv+BN(+activation) → + Conv+Add+Relu → + MatMul/Gemm → all.
Each stage is optimized, saved to `work_dir` and opened by `runner_for`; all are timed
interleaved, so the differences are our fusions' alone. A stage slower than the one before it
is kept in the result (and flagged by the caller), never hidden.

The default runner is ONNX Runtime on the CPU with its own graph optimizations off: the right
measurement for the onnxruntime backend. For tensorrt the caller supplies a runner that builds
an engine from each stage file; the default still runs a tensorrt stage (its fuseforge plugin
nodes decomposed into standard ops), but those timings say nothing about TensorRT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner, runner_for_model
from optimizer.backends.runner import Runner
from optimizer.measure.benchmark import BenchmarkOptions, BenchmarkResult, benchmark_interleaved
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES, FusionPass, PassStage
from optimizer.plugins.decompose import imports_plugin_opset

__all__ = [
    "ABLATION_STAGES",
    "RunnerFor",
    "ablation_pass_sets",
    "onnxruntime_stage_runner",
    "run_ablation",
]


def _cumulative_stages() -> tuple[tuple[str, frozenset[PassStage]], ...]:
    """"none", then one variant per fusion stage in PassStage's order, each with every stage
    before it; the last, which has them all, is named "all". Clean-up is not timed alone: the
    fusions need the constants it folds and the shapes it infers."""
    fusions = [stage for stage in PassStage if stage is not PassStage.CLEANUP]
    variants: list[tuple[str, frozenset[PassStage]]] = [("none", frozenset())]
    for count, stage in enumerate(fusions, start=1):
        name = "all" if count == len(fusions) else stage.value
        variants.append((name, frozenset({PassStage.CLEANUP, *fusions[:count]})))
    return tuple(variants)


# (variant name, the pass stages it includes); each adds to the one before.
ABLATION_STAGES = _cumulative_stages()

# Opens a runner on a stage's ONNX file; closed when the ablation is done.
RunnerFor = Callable[[Path], AbstractContextManager[Runner]]


def ablation_pass_sets(backend: str, catalog: Sequence[FusionPass] = DEFAULT_PASSES,
                       ) -> list[tuple[str, list[str]]]:
    """The pass names of each cumulative stage for `backend` (default-on passes of `catalog`
    only)."""
    return [
        (name, [p.name for p in catalog
                if p.stage in stages and p.supports(backend) and backend not in p.off_by_default])
        for name, stages in ABLATION_STAGES
    ]


@contextmanager
def onnxruntime_stage_runner(path: Path) -> Iterator[Runner]:
    """The default `runner_for`: ONNX Runtime, graph optimizations off, on the stage file.

    A file without fuseforge plugin nodes is opened as it is; one with them runs decomposed into
    standard ops from a temporary copy (see `runner_for_model`), which the runner's spec names.

    Raises:
        EngineBuildError: ONNX Runtime cannot load the stage.
        PluginNotFoundError, PassError: a plugin node cannot be decomposed.
    """
    model = onnx.load(path)
    if not imports_plugin_opset(model):
        del model  # ONNX Runtime reads the file itself
        with OnnxRuntimeRunner(path) as runner:
            yield runner
        return
    with runner_for_model(model) as decomposed:
        yield decomposed


def run_ablation(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    options: BenchmarkOptions,
    *,
    backend: str,
    batch_size: int,
    work_dir: Path,
    runner_for: RunnerFor = onnxruntime_stage_runner,
    catalog: tuple[FusionPass, ...] = DEFAULT_PASSES,
) -> list[BenchmarkResult]:
    """Benchmark each cumulative stage of `model` (static shapes), reference = "none".

    Stage `name` is saved as `work_dir/ablation-<name>.onnx` and opened with `runner_for`
    (every runner stays open until all are timed). For a tensorrt job pass a runner that builds
    and loads an engine from that file: the default times ONNX Runtime on the CPU. The stages
    take their passes from `catalog` (the job's OptimizeOptions.catalog).

    Raises:
        Whatever `runner_for` raises for a stage it cannot open (runners already open are
        closed first); InferenceError when a runner fails while timed.
    """
    paths = {}
    for name, passes in ablation_pass_sets(backend, catalog):
        stage = OptimizeOptions(backend=backend, passes=passes, catalog=catalog)
        staged, _ = optimize_model(model, stage)
        paths[name] = work_dir / f"ablation-{name}.onnx"
        onnx.save(staged, paths[name])
    with ExitStack() as stack:
        runners = {name: stack.enter_context(runner_for(path)) for name, path in paths.items()}
        return benchmark_interleaved(runners, feeds, options, reference="none",
                                     batch_size=batch_size)
