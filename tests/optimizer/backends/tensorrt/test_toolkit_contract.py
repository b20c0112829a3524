"""The contract every TensorRTToolkit keeps: TensorRT itself (where it and a GPU exist) and the
FakeTensorRT the rest of the suite uses in their place pass the same tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import DeviceTimedRunner, Runner
from optimizer.backends.tensorrt import EngineMetadata, LogLine, TrtBuildOptions, TrtEngine
from optimizer.backends.tensorrt.toolkit import TENSORRT, TensorRTToolkit
from optimizer.capabilities import GpuInfo
from optimizer.errors import EngineBuildError
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes
from optimizer.model.tensor_specs import numpy_dtype, summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import convert_precision
from optimizer.testing.models import small_cnn
from optimizer.testing.real_models import bert_encoder
from tests.support.fake_tensorrt import FAKE_TENSORRT


def _real_toolkit_or_skip() -> TensorRTToolkit:
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip("TensorRT is not installed here: the real toolkit's contract tests skip "
                    "(FakeTensorRT's run)")
    capabilities = TENSORRT.detect_capabilities()
    if not capabilities.can_build_tensorrt:
        pytest.skip(f"no GPU with TensorRT here ({capabilities.describe()}): the real "
                    "toolkit's contract tests skip")
    return TENSORRT


@pytest.fixture(params=["tensorrt", "fake-tensorrt"])
def toolkit(request: pytest.FixtureRequest) -> TensorRTToolkit:
    return _real_toolkit_or_skip() if request.param == "tensorrt" else FAKE_TENSORRT


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def _static_cnn(tmp_path: Path, batch: int = 2) -> Path:
    return _save(fix_input_shapes(small_cnn(seed=3), {"input": (batch, 3, 32, 32)}),
                 tmp_path / "cnn.onnx")


def _build(toolkit: TensorRTToolkit, model_path: Path, out_dir: Path, *, precision: str = "fp32",
           cache: bytes | None = None, profiles: dict[str, object] | None = None,
           on_progress: Callable[[float, str], None] | None = None,
           on_log: Callable[[LogLine], None] | None = None) -> TrtEngine:
    gpu = toolkit.detect_capabilities().gpu
    return toolkit.build_engine(model_path, out_dir, options=TrtBuildOptions(precision=precision),  # type: ignore[arg-type]
                                profiles=profiles, timing_cache=cache, on_progress=on_progress,
                                on_log=on_log, gpu=gpu)


def _open(toolkit: TensorRTToolkit, engine: TrtEngine) -> Runner:
    return toolkit.open_runner(engine.metadata_path.parent, gpu=toolkit.detect_capabilities().gpu)


def _outputs(runner_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with OnnxRuntimeRunner(runner_path) as runner:
        return runner.infer(feeds)


def test_toolkit_reports_a_gpu_it_can_build_on(toolkit: TensorRTToolkit) -> None:
    capabilities = toolkit.detect_capabilities()
    assert capabilities.can_build_tensorrt
    assert capabilities.gpu is not None and capabilities.gpu.compute_capability


def test_build_writes_engine_metadata_report_and_cache(toolkit: TensorRTToolkit,
                                                       tmp_path: Path) -> None:
    model_path = _static_cnn(tmp_path)
    progress: list[float] = []
    lines: list[LogLine] = []
    engine = _build(toolkit, model_path, tmp_path / "engine",
                    on_progress=lambda fraction, _phase: progress.append(fraction),
                    on_log=lines.append)
    assert engine.engine_path.is_file() and engine.engine_path.stat().st_size > 0
    metadata = EngineMetadata.from_json(engine.metadata_path.read_text())
    assert metadata == engine.metadata
    assert metadata.precision == "fp32" and metadata.plugins == ()
    assert metadata.profiles[0]["input"].opt == (2, 3, 32, 32)
    assert metadata.engine_bytes == engine.engine_path.stat().st_size
    assert not metadata.timing_cache_warm
    assert engine.report["layers"] > 0 and engine.report["onnx_nodes_in_layers"] > 0
    assert engine.report_path.is_file()
    assert engine.timing_cache
    assert progress and progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert lines and all(line.severity in {"ERROR", "WARNING", "INFO", "VERBOSE",
                                           "INTERNAL_ERROR"} for line in lines)


def test_second_build_starts_from_the_returned_timing_cache(toolkit: TensorRTToolkit,
                                                            tmp_path: Path) -> None:
    model_path = _static_cnn(tmp_path)
    first = _build(toolkit, model_path, tmp_path / "first")
    second = _build(toolkit, model_path, tmp_path / "second", cache=first.timing_cache)
    assert not first.metadata.timing_cache_warm and second.metadata.timing_cache_warm


def test_unreadable_timing_cache_means_a_cold_build(toolkit: TensorRTToolkit,
                                                    tmp_path: Path) -> None:
    engine = _build(toolkit, _static_cnn(tmp_path), tmp_path / "engine", cache=b"not a cache")
    assert not engine.metadata.timing_cache_warm and engine.engine_path.is_file()


def test_runner_reproduces_the_model_in_fp32(toolkit: TensorRTToolkit, tmp_path: Path) -> None:
    model_path = _static_cnn(tmp_path)
    engine = _build(toolkit, model_path, tmp_path / "engine")
    feeds = random_feeds(summarize_model(onnx.load(model_path)).inputs, count=1, seed=1)[0]
    gpu = toolkit.detect_capabilities().gpu
    with toolkit.open_runner(engine.metadata_path.parent, gpu=gpu) as runner:
        outputs = runner.infer(feeds)
        assert runner.output_names == ("logits",)
        assert runner.spec().backend  # recreatable in another process
        assert isinstance(runner, DeviceTimedRunner)
        timings = runner.time_inference(feeds, warmup=1, iterations=3)
        assert len(timings) == 3 and all(t > 0 for t in timings)
        assert runner.device_bytes_in_use > 0
    np.testing.assert_allclose(outputs["logits"], _outputs(model_path, feeds)["logits"],
                               rtol=1e-4, atol=1e-4)


def test_runner_refuses_an_engine_built_for_another_compute_capability(
        toolkit: TensorRTToolkit, tmp_path: Path) -> None:
    engine = _build(toolkit, _static_cnn(tmp_path), tmp_path / "engine")
    other = GpuInfo(index=0, name="NVIDIA A100", compute_capability="8.0", memory_total_mib=None)
    with pytest.raises(EngineBuildError, match="compute capability"):
        toolkit.open_runner(engine.metadata_path.parent, gpu=other)


def test_build_refuses_a_model_that_does_not_carry_the_precision(toolkit: TensorRTToolkit,
                                                                 tmp_path: Path) -> None:
    with pytest.raises(EngineBuildError, match="fp16"):
        _build(toolkit, _static_cnn(tmp_path), tmp_path / "engine", precision="fp16")


def test_fp16_engine_stays_close_to_the_fp32_model(toolkit: TensorRTToolkit,
                                                   tmp_path: Path) -> None:
    model_path = _static_cnn(tmp_path)
    converted, _ = convert_precision(onnx.load(model_path), "fp16")
    engine = _build(toolkit, _save(converted, tmp_path / "cnn.fp16.onnx"), tmp_path / "engine",
                    precision="fp16")
    feeds = random_feeds(summarize_model(onnx.load(model_path)).inputs, count=1, seed=2)[0]
    with _open(toolkit, engine) as runner:
        half_feeds = {spec.name: feeds[spec.name].astype(numpy_dtype(spec.dtype))
                      for spec in runner.inputs}
        outputs = runner.infer(half_feeds)["logits"].astype(np.float32)
    reference = _outputs(model_path, feeds)["logits"]
    assert engine.metadata.precision == "fp16"
    np.testing.assert_allclose(outputs, reference, rtol=2e-2, atol=2e-2)
    assert not np.allclose(outputs, reference, rtol=0, atol=1e-7)  # it did compute in fp16


def test_plugin_nodes_build_and_are_recorded(toolkit: TensorRTToolkit, tmp_path: Path) -> None:
    original = bert_encoder(layers=1, hidden=64, heads=2, seq=16, seed=5)
    fused, _ = optimize_model(original, OptimizeOptions(backend="tensorrt"))
    model_path = _save(fused, tmp_path / "bert.fused.onnx")
    engine = _build(toolkit, model_path, tmp_path / "engine")
    assert set(engine.metadata.plugins) >= {"SkipLayerNorm", "BiasGelu"}
    inputs = summarize_model(original).inputs
    feeds = random_feeds(inputs, count=1, seed=4, ranges={"input_ids": (0, 1000),
                                                          "attention_mask": (-1.0, 0.0)})[0]
    with _open(toolkit, engine) as runner:
        outputs = runner.infer(feeds)["last_hidden_state"]
    original_path = _save(original, tmp_path / "bert.onnx")
    np.testing.assert_allclose(outputs, _outputs(original_path, feeds)["last_hidden_state"],
                               rtol=1e-3, atol=1e-3)


def test_profiles_are_recorded_and_the_engine_runs_across_them(toolkit: TensorRTToolkit,
                                                                tmp_path: Path) -> None:
    model_path = _save(small_cnn(seed=6), tmp_path / "cnn.dynamic.onnx")
    profile = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [8, 3, 32, 32]}
    engine = _build(toolkit, model_path, tmp_path / "engine", profiles={"input": profile})
    assert engine.metadata.profiles[0]["input"].to_dict() == profile
    with _open(toolkit, engine) as runner:
        for batch in (1, 8):
            feeds = {"input": np.random.default_rng(batch).normal(
                size=(batch, 3, 32, 32)).astype(np.float32)}
            assert runner.infer(feeds)["logits"].shape == (batch, 10)
