"""original_as_engine: the user's model, unchanged, as an engine loaded at ONNX Runtime's
default level; a model with a data file keeps its weights byte for byte in engine.onnx.data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from optimizer.backends.onnxruntime.build import ENGINE_DATA_FILE, runner_for_engine
from optimizer.backends.onnxruntime.original import original_as_engine
from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.model.external_data import external_tensors
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.testing import models

_SHAPES = {"input": (1, 3, 32, 32)}


def test_the_original_engine_is_the_uploads_bytes_loaded_at_the_default_level(tmp_path: Path):
    source = tmp_path / "upload" / "cnn.onnx"
    source.parent.mkdir()
    onnx.save(models.small_cnn(seed=3), source)

    engine = original_as_engine(source, tmp_path / "engine", intra_op_threads=2,
                                input_shapes=_SHAPES)

    assert engine.model_path.read_bytes() == source.read_bytes()
    assert engine.data_path is None
    manifest = engine.manifest
    assert (manifest["original"], manifest["load_optimization_level"],
            manifest["disabled_optimizers"], manifest["intra_op_threads"],
            manifest["engine_data_file"]) == (True, "all", {}, 2, None)
    with runner_for_engine(engine.manifest_path) as runner:
        assert runner.optimization_level == "all" and runner.disabled_optimizers == ()


def test_the_original_engine_of_a_model_with_a_data_file_keeps_its_weights(tmp_path: Path):
    model = models.small_cnn(seed=4)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    source = tmp_path / "upload" / "cnn.onnx"
    source.parent.mkdir()
    onnx.save(model, source, save_as_external_data=True, location="weights.bin",
              size_threshold=256)
    feeds = random_feeds([TensorSpec("input", "float32", _SHAPES["input"])], count=2, seed=0)

    engine = original_as_engine(source, tmp_path / "engine", intra_op_threads=None,
                                input_shapes=_SHAPES)

    assert engine.data_path == engine.model_path.with_name(ENGINE_DATA_FILE)
    written = onnx.load(engine.model_path, load_external_data=False)
    assert {t.name for t in external_tensors(written)} and all(
        entry.value == ENGINE_DATA_FILE for t in external_tensors(written)
        for entry in t.external_data if entry.key == "location")
    loaded = onnx.load(engine.model_path)
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in loaded.graph.initializer} == \
        {name: array.tobytes() for name, array in weights.items()}
    with OnnxRuntimeRunner(source, optimization_level="all") as expected, \
            runner_for_engine(engine.manifest_path) as shipped:
        for feed in feeds:
            for name, value in expected.infer(feed).items():
                np.testing.assert_array_equal(shipped.infer(feed)[name], value)
