"""build_ov_engine: the IR OpenVINO users deploy (engine.xml + engine.bin) and a manifest, which
runner_for_engine compiles at the precision and threads it records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.openvino.build import (
    OvBuildOptions,
    build_ov_engine,
    engine_runner_options,
    runner_for_engine,
)
from optimizer.errors import EngineBuildError, InferenceError, InputShapeError, InternalError
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.registries.precisions import Precision
from optimizer.validation import default_tolerances, validate
from tests.support.host_cpu import needs_cpu_for, needs_cpu_without

SHAPES = {"input": [2, 3, 32, 32]}


def _feeds(batch: int = 2) -> list[dict[str, np.ndarray]]:
    return random_feeds([TensorSpec("input", "float32", (batch, 3, 32, 32))], count=2, seed=0)


@pytest.mark.parametrize("precision", [
    Precision.FP32, pytest.param(Precision.BF16, marks=needs_cpu_for(Precision.BF16))])
def test_build_ov_engine_writes_the_ir_and_a_manifest_that_compiles_it(
        cnn_path: Path, tmp_path: Path, precision: Precision) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions(precision=precision, threads=1))

    assert engine.model_path.name == "engine.xml" and engine.model_path.stat().st_size > 0
    assert engine.weights_path.name == "engine.bin" and engine.weights_path.stat().st_size > 0
    manifest = json.loads(engine.manifest_path.read_text())
    assert manifest == json.loads(json.dumps(engine.manifest))
    assert manifest["backend"] == "openvino" and manifest["device"] == "CPU"
    assert manifest["precision"] == str(precision)
    assert manifest["inference_precision"] == {"fp32": "f32", "bf16": "bf16"}[precision]
    assert manifest["threads"] == 1 and manifest["input_shapes"] == SHAPES
    assert manifest["source_model"]["op_histogram"]["BatchNormalization"] == 2
    assert "BatchNormalization" not in manifest["engine_model"]["op_histogram"]
    with runner_for_engine(engine.manifest_path) as runner:
        assert runner.inputs == (TensorSpec("input", "float32", (2, 3, 32, 32)),)
        assert runner.output_names == ("logits",)
        assert (runner.inference_precision, runner.threads) == (
            manifest["inference_precision"], 1)


def test_fp32_engine_computes_in_fp32_even_where_the_cpu_has_bf16(cnn_path: Path,
                                                                   tmp_path: Path) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions(precision=Precision.FP32))

    assert set(engine.manifest["runtime_precisions"]) <= {"f32", "i32", "i64"}
    with OnnxRuntimeRunner(cnn_path) as original, runner_for_engine(engine.model_path.parent) \
            as built:
        report = validate(original, built, _feeds(), default_tolerances("fp32"))
    assert report.passed, report.to_dict()


@needs_cpu_for(Precision.BF16)
def test_bf16_engine_stays_within_bf16_tolerances(cnn_path: Path, tmp_path: Path) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions(precision=Precision.BF16))

    with OnnxRuntimeRunner(cnn_path) as original, runner_for_engine(engine.manifest_path) \
            as built:
        report = validate(original, built, _feeds(), default_tolerances("bf16"))
        strict = validate(original, built, _feeds(), default_tolerances("fp32"))
    assert report.passed, report.to_dict()
    assert not strict.passed  # it really computed in bf16: fp32's limits catch it
    if "bf16" not in engine.manifest["runtime_precisions"]:
        pytest.fail(f"no layer ran in bf16: {engine.manifest['runtime_precisions']}")


@needs_cpu_without(Precision.BF16)
def test_bf16_is_refused_where_the_cpu_would_compute_it_in_f32(cnn_path: Path,
                                                                tmp_path: Path) -> None:
    # OpenVINO compiles a bf16 hint at f32 on such a CPU without a word: an engine called bf16
    # that computes in f32 must not be built.
    with pytest.raises(EngineBuildError) as caught:
        build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                        options=OvBuildOptions(precision=Precision.BF16))

    assert "'f32', not the 'bf16' asked for" in str(caught.value)
    assert "no bf16 instructions" in str(caught.value)


def test_engine_keeps_the_models_dynamic_dims_when_asked(cnn_path: Path, tmp_path: Path) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions(), keep_inputs_dynamic=True)

    assert engine.manifest["inputs_left_dynamic"] is True
    with runner_for_engine(engine.manifest_path) as built, OnnxRuntimeRunner(cnn_path) as original:
        assert built.inputs[0].shape == (None, 3, 32, 32)
        for batch in (1, 3):
            report = validate(original, built, _feeds(batch), default_tolerances("fp32"))
            assert report.passed, report.to_dict()


def test_engine_takes_a_range_of_batch_sizes_and_refuses_one_outside(cnn_path: Path,
                                                                     tmp_path: Path) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions(),
                             input_ranges={"input": [(1, 4), (3, 3), (32, 32), (32, 32)]})

    with runner_for_engine(engine.manifest_path) as built:
        assert built.infer(_feeds(4)[0])["logits"].shape == (4, 10)
        with pytest.raises(InferenceError, match="input"):
            built.infer(_feeds(5)[0])


def test_fixed_engine_refuses_another_batch(cnn_path: Path, tmp_path: Path) -> None:
    engine = build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                             options=OvBuildOptions())

    with runner_for_engine(engine.manifest_path) as built, pytest.raises(InferenceError, match="input"):
        built.infer(_feeds(3)[0])


def test_build_refuses_a_range_for_an_unknown_input(cnn_path: Path, tmp_path: Path) -> None:
    with pytest.raises(InputShapeError, match="'pixels'"):
        build_ov_engine(cnn_path, tmp_path / "engine", input_shapes=SHAPES,
                        options=OvBuildOptions(), input_ranges={"pixels": [(1, 2)]})


def test_build_names_the_model_when_openvino_cannot_convert_it(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")

    with pytest.raises(EngineBuildError, match="broken.onnx"):
        build_ov_engine(broken, tmp_path / "engine", input_shapes={},
                        options=OvBuildOptions())


def test_engine_runner_options_refuses_another_backends_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"backend": "onnxruntime", "engine_file": "engine.onnx",
                                    "inference_precision": "f32"}))

    with pytest.raises(InternalError, match="not 'openvino'"):
        engine_runner_options(manifest)
