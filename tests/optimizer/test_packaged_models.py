"""The model-zoo networks the `onnx` package ships (its "light" test models, opset 9, weights
made by ConstantOfShape) go through every pass unbroken: valid, no bigger, same outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.testing.passes import random_inputs, run_model

LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# Networks whose Conv+Relu pairs are plain enough to fuse; the others still must not break.
FUSES_CONV_RELU = {"bvlc_alexnet", "inception_v1", "squeezenet", "vgg19", "zfnet512"}


def _light_models() -> list[Path]:
    return sorted(LIGHT_MODELS.glob("light_*.onnx"))


@pytest.mark.skipif(not _light_models(), reason=f"no light models shipped in {LIGHT_MODELS}")
@pytest.mark.parametrize("path", _light_models(), ids=lambda p: p.stem.removeprefix("light_"))
def test_packaged_model_survives_every_pass(path: Path) -> None:
    model = onnx.load(path)
    model = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))
    fused, report = optimize_model(model, OptimizeOptions())

    onnx.checker.check_model(fused, full_check=True)
    assert report.nodes_after <= report.nodes_before
    if path.stem.removeprefix("light_") in FUSES_CONV_RELU:
        assert report.ops_after.get("com.microsoft.FusedConv", 0) > 0
    feeds = random_inputs(model)
    for want, got in zip(run_model(model, feeds), run_model(fused, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not _light_models(), reason=f"no light models shipped in {LIGHT_MODELS}")
@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "shufflenet", "squeezenet"])
def test_every_engine_node_of_a_packaged_model_maps_back_to_its_original_nodes(
        name: str, tmp_path: Path) -> None:
    import onnxruntime as ort

    from optimizer.measure.provenance import compose, name_unnamed_nodes, node_provenance

    model = onnx.load(LIGHT_MODELS / f"light_{name}.onnx")
    model = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))
    assert name_unnamed_nodes(model.graph)  # the zoo leaves many nodes unnamed
    fused, _ = optimize_model(model, OptimizeOptions())
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "session.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(fused.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session = onnx.load(str(tmp_path / "session.onnx"), load_external_data=False).graph
    name_unnamed_nodes(session)

    provenance = compose(node_provenance(model.graph, fused.graph),
                         node_provenance(fused.graph, session))

    assert provenance and not [node for node, origins in provenance.items() if not origins]
    compute = {n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    assert compute <= {o for origins in provenance.values() for o in origins}
