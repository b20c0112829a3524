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
