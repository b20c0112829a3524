"""All passes on full-size models built in code: everything the brief names is fused, and the
outputs still match the original's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.testing.passes import run_model
from optimizer.testing.real_models import BERT_FORMS, bert_encoder, resnet50


def _static(model: onnx.ModelProto) -> onnx.ModelProto:
    return fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))


def _bert_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (1, 128)).astype(np.int64)
    mask = np.zeros((1, 1, 1, 128), np.float32)
    mask[..., 96:] = -10000.0  # padding hides the last quarter
    return {"input_ids": ids, "attention_mask": mask}


def test_resnet50_has_no_batch_norm_left_and_matches_the_original() -> None:
    model = _static(resnet50())
    fused, report = optimize_model(model, OptimizeOptions())

    assert report.ops_before["BatchNormalization"] == 53
    assert "BatchNormalization" not in report.ops_after
    assert report.ops_after["com.microsoft.FusedConv"] == 49  # 33 Conv+Relu, 16 Conv+Add+Relu
    assert "Relu" not in report.ops_after and "Add" not in report.ops_after
    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224), np.float32)}
    np.testing.assert_allclose(run_model(fused, feed)[0], run_model(model, feed)[0],
                               atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("form", BERT_FORMS)
def test_bert_encoder_layer_norms_gelus_and_attention_are_fused(form: str) -> None:
    model = _static(bert_encoder(layers=2, form=form))
    fused, report = optimize_model(model, OptimizeOptions())

    for written_out in ("ReduceMean", "Erf", "Softmax", "Sqrt", "Pow", "Transpose"):
        assert written_out not in report.ops_after, (written_out, report.ops_after)
    assert report.ops_after["LayerNormalization"] == 5  # embeddings + 2 per layer
    assert report.ops_after["com.microsoft.BiasGelu"] == 2
    assert report.applied("FuseMultiHeadAttention") == 2
    # ...then packed with their Q, K, V projections (pack_attention_projections)
    assert report.ops_after["com.microsoft.Attention"] == 2
    assert report.applied("fuse_residual_gemm") == 4  # both residual Adds of both layers
    feeds = _bert_feeds(model)
    np.testing.assert_allclose(run_model(fused, feeds)[0], run_model(model, feeds)[0],
                               atol=1e-4, rtol=1e-3)
