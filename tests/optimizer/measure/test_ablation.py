"""run_ablation: one timed variant per cumulative fusion stage, each run by the caller's runner
(a TensorRT engine per stage for tensorrt jobs) or, by default, by ONNX Runtime on the CPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import Runner, runner_from_spec
from optimizer.errors import InternalError
from optimizer.measure.ablation import ABLATION_STAGES, onnxruntime_stage_runner, run_ablation
from optimizer.measure.benchmark import BenchmarkOptions
from optimizer.measure.memory_probe import measure_peak_memory_mb
from optimizer.model.shapes import fix_input_shapes
from optimizer.plugins import DOMAIN
from optimizer.testing.models import small_cnn
from tests.optimizer.validation.tensorrt_bert import bert_feeds, plugin_counts, small_bert

QUICK = BenchmarkOptions(warmup=1, iterations=3, measure_memory=False)
STAGES = [name for name, _ in ABLATION_STAGES]


def cnn() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model = fix_input_shapes(small_cnn(seed=3), {"input": [2, 3, 32, 32]})
    feeds = {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32), np.float32)}
    return model, feeds


def stage_file(work_dir: Path, stage: str) -> Path:
    return work_dir / f"ablation-{stage}.onnx"


def test_onnxruntime_ablation_runs_each_stage_from_its_own_file(tmp_path: Path) -> None:
    model, feeds = cnn()

    results = run_ablation(model, feeds, QUICK, backend="onnxruntime", batch_size=2,
                           work_dir=tmp_path)

    assert [r.variant for r in results] == STAGES
    assert {r.backend for r in results} == {"onnxruntime"}
    assert results[0].speedup_vs_reference is None
    assert all(r.speedup_vs_reference is not None and r.latency_ms_p50 > 0 for r in results[1:])
    nodes = {s: len(onnx.load(stage_file(tmp_path, s)).graph.node) for s in STAGES}
    assert nodes["all"] < nodes["none"]  # the stages really differ


def test_default_runner_opens_a_plugin_free_stage_file_as_it_is(tmp_path: Path) -> None:
    model, feeds = cnn()
    path = tmp_path / "stage.onnx"
    onnx.save(model, path)

    with onnxruntime_stage_runner(path) as runner:
        assert isinstance(runner, OnnxRuntimeRunner)
        assert runner.spec().model_path == str(path.resolve())
        assert runner.spec().options["optimization_level"] == "disabled"
        runner.infer(feeds)


def test_tensorrt_ablation_with_the_default_runner_runs_plugin_stages_decomposed(
        tmp_path: Path) -> None:
    model = small_bert(seed=0)
    (feeds,) = bert_feeds(seed=0, count=1)

    results = run_ablation(model, feeds, QUICK, backend="tensorrt", batch_size=1,
                           work_dir=tmp_path)

    assert [r.variant for r in results] == STAGES
    # The stage files keep the plugin nodes: they are what a TensorRT build would read.
    assert sum(plugin_counts(onnx.load(stage_file(tmp_path, "all"))).values()) == 9
    assert not plugin_counts(onnx.load(stage_file(tmp_path, "none")))


def test_default_runner_of_a_plugin_stage_can_be_recreated_from_its_spec(
        tmp_path: Path) -> None:
    model = small_bert(seed=1)
    (feeds,) = bert_feeds(seed=1, count=1)
    run_ablation(model, feeds, QUICK, backend="tensorrt", batch_size=1, work_dir=tmp_path)
    path = stage_file(tmp_path, "all")

    with onnxruntime_stage_runner(path) as runner:
        spec = runner.spec()
        expected = runner.infer(feeds)
        # The spec names the decomposed copy, so another process (the memory probe) can load it.
        assert Path(spec.model_path) != path.resolve()
        assert not any(n.domain == DOMAIN for n in onnx.load(spec.model_path).graph.node)
        with runner_from_spec(spec) as again:
            np.testing.assert_array_equal(again.infer(feeds)["last_hidden_state"],
                                          expected["last_hidden_state"])
        assert measure_peak_memory_mb(spec, feeds, iterations=1) > 0
    assert not Path(spec.model_path).exists()  # the decomposed copy goes with the runner


def test_a_supplied_runner_gets_every_stage_file_and_is_closed(tmp_path: Path) -> None:
    model = small_bert(seed=2)
    (feeds,) = bert_feeds(seed=2, count=1)
    opened: list[Path] = []
    closed: list[Path] = []

    @contextmanager
    def recording_runner(path: Path) -> Iterator[Runner]:
        opened.append(path)
        with onnxruntime_stage_runner(path) as runner:
            yield runner
        closed.append(path)

    results = run_ablation(model, feeds, QUICK, backend="tensorrt", batch_size=1,
                           work_dir=tmp_path, runner_for=recording_runner)

    assert [r.variant for r in results] == STAGES
    assert opened == [stage_file(tmp_path, s) for s in STAGES]
    assert sorted(closed) == sorted(opened)


def test_a_runner_that_fails_to_open_closes_the_ones_already_open(tmp_path: Path) -> None:
    model, feeds = cnn()
    closed: list[Path] = []

    @contextmanager
    def failing_runner(path: Path) -> Iterator[Runner]:
        if path.name == "ablation-add_relu.onnx":
            raise InternalError(f"no engine for {path.name}")
        try:
            with onnxruntime_stage_runner(path) as runner:
                yield runner
        finally:
            closed.append(path)

    with pytest.raises(InternalError, match="no engine for ablation-add_relu.onnx"):
        run_ablation(model, feeds, QUICK, backend="onnxruntime", batch_size=2,
                     work_dir=tmp_path, runner_for=failing_runner)
    assert closed == [stage_file(tmp_path, "conv_bn_act"), stage_file(tmp_path, "none")]
