"""The networks the `onnx` package ships (its "light" models: real Caffe2 exports at opset 9,
weights made by ConstantOfShape) quantize into int8 models that load and run: the graph is
brought to opset 13 first, where per-channel DequantizeLinear is valid. (On four of them,
ONNX Runtime's own quantize_static fails outright at this opset: bench/quantize.py compares.)"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.quantization.calibration import calibrate
from optimizer.quantization.qdq_opset import QDQ_OPSET, at_qdq_opset, default_opset
from optimizer.quantization.quantize import quantize_static_model
from optimizer.registries.quantization import CalibrationMethod, QuantFlavour
from optimizer.testing.passes import random_inputs

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# Small enough to calibrate in seconds; alexnet and inception_v1 are two that ORT's own
# quantizer cannot calibrate at their opset.
MODELS = ("bvlc_alexnet", "inception_v1", "squeezenet")


@pytest.mark.skipif(not LIGHT_MODELS.is_dir(), reason=f"no light models shipped in {LIGHT_MODELS}")
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("flavour", [QuantFlavour.ORT_U8S8, QuantFlavour.TENSORRT])
def test_an_opset_9_export_quantizes_into_a_model_that_loads_and_runs(
        name: str, flavour: QuantFlavour, tmp_path: Path) -> None:
    model = onnx.load(LIGHT_MODELS / f"light_{name}.onnx")
    model = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))
    assert default_opset(model) == 9
    fused, _ = optimize_model(model, OptimizeOptions(for_quantization=True))
    graph, note = at_qdq_opset(fused)
    feeds = [random_inputs(model, seed=seed) for seed in range(2)]

    quantized = quantize_static_model(graph, calibrate(graph, feeds, CalibrationMethod.MINMAX),
                                      flavour)

    assert note is not None and default_opset(quantized) >= QDQ_OPSET
    onnx.checker.check_model(quantized)
    path = tmp_path / "int8.onnx"
    onnx.save(quantized, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds[0])
    assert outputs and all(out.size for out in outputs)
    zero_points = [init for init in quantized.graph.initializer if "zero_point" in init.name]
    assert zero_points
    if flavour is QuantFlavour.TENSORRT:  # symmetric: every zero point is 0, int8
        assert all(onnx.numpy_helper.to_array(zp).any() == 0 for zp in zero_points)
        assert {zp.data_type for zp in zero_points} == {onnx.TensorProto.INT8}
