"""Bytes per inference: the initializers once, inputs and outputs scaled with the batch."""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.measure.traffic import ModelTraffic, model_traffic


def _matmul(path: Path, batch: int | str) -> Path:
    weight = numpy_helper.from_array(np.ones((3, 4), dtype=np.float32), "w")  # 48 bytes
    bias = helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(
        np.ones(4, dtype=np.float16), "b"))  # 8 bytes
    graph = helper.make_graph(
        [bias, helper.make_node("MatMul", ["x", "w"], ["y0"]),
         helper.make_node("Add", ["y0", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [weight])
    onnx.save(helper.make_model(graph), path)
    return path


def test_traffic_counts_weights_once_and_inputs_outputs_per_sample(tmp_path: Path) -> None:
    traffic = model_traffic(_matmul(tmp_path / "m.onnx", batch=2))

    assert traffic == ModelTraffic(weight_bytes=48 + 8, io_bytes_per_sample=12 + 16)
    assert traffic.bytes_per_inference(2) == 56 + 2 * 28
    assert traffic.bytes_per_inference(8) == 56 + 8 * 28


def test_a_symbolic_batch_scales_like_a_fixed_one(tmp_path: Path) -> None:
    assert model_traffic(_matmul(tmp_path / "d.onnx", batch="N")) == model_traffic(
        _matmul(tmp_path / "s.onnx", batch=1))
