"""optimizer.testing.real_models: the ResNet-50 and BERT builders are valid, run, and keep their
written-out ops."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optimizer.testing.real_models import BERT_FORMS, BertForm, bert_encoder, resnet50

# Small enough for a 2-core machine; the structure is what the tests are about.
BERT_SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "batch": 2}
WRITTEN_LAYER_NORM = ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
WRITTEN_GELU = ["Div", "Erf", "Add", "Mul", "Mul"]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _ops(model: onnx.ModelProto, *, constants: bool = False) -> list[str]:
    return [n.op_type for n in model.graph.node if constants or n.op_type != "Constant"]


def _bert_feeds(seed: int, masked_from: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    batch, seq = BERT_SHAPE["batch"], BERT_SHAPE["seq"]
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    if masked_from is not None:
        mask[..., masked_from:] = -10000.0
    return {"input_ids": rng.integers(0, 1000, (batch, seq)), "attention_mask": mask}


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    return resnet50(batch=1)


def test_resnet50_has_the_torchvision_structure(resnet: onnx.ModelProto) -> None:
    onnx.checker.check_model(resnet, full_check=True)
    assert Counter(_ops(resnet)) == {
        "Conv": 53, "BatchNormalization": 53, "Relu": 49, "Add": 16, "MaxPool": 1,
        "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert resnet.opset_import[0].version == 17
    [graph_input] = resnet.graph.input
    assert graph_input.name == "input"
    assert [d.dim_value for d in graph_input.type.tensor_type.shape.dim] == [1, 3, 224, 224]
    weights = sum(int(np.prod(t.dims)) for t in resnet.graph.initializer
                  if not t.name.endswith(("running_mean", "running_var")))
    assert 25_500_000 < weights < 25_600_000  # torchvision reports 25,557,032 parameters


def test_resnet50_runs_with_finite_input_dependent_logits(resnet: onnx.ModelProto) -> None:
    session = _session(resnet)
    rng = np.random.default_rng(0)
    first, second = (session.run(None, {"input": rng.standard_normal((1, 3, 224, 224))
                                        .astype(np.float32)})[0] for _ in range(2))
    assert first.shape == (1, 1000)
    assert np.isfinite(first).all() and 0.1 < first.std() < 100
    assert np.abs(first - second).max() > 1e-2


def test_resnet50_batch_is_symbolic_by_default() -> None:
    dims = resnet50().graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N"


@pytest.mark.parametrize("form", BERT_FORMS)
def test_bert_encoder_runs_with_finite_input_and_mask_dependent_output(form: BertForm) -> None:
    model = bert_encoder(**BERT_SHAPE, form=form)
    onnx.checker.check_model(model, full_check=True)
    session = _session(model)
    base = session.run(None, _bert_feeds(0))[0]
    other_ids = session.run(None, _bert_feeds(1))[0]
    masked = session.run(None, _bert_feeds(0, masked_from=8))[0]
    assert base.shape == (2, 16, 64)
    assert np.isfinite(base).all() and np.isfinite(masked).all()
    assert np.abs(base - other_ids).max() > 1e-2
    # Masking the tail changes what the kept tokens attend to.
    assert np.abs(base[:, :8] - masked[:, :8]).max() > 1e-3


def test_bert_forms_compute_the_same_function() -> None:
    # One seed draws the same weights in every form, so the written-out LayerNorm and GELU
    # must agree with ONNX Runtime's LayerNormalization and Gelu kernels.
    feeds = _bert_feeds(0, masked_from=12)
    outputs = {form: _session(bert_encoder(**BERT_SHAPE, form=form)).run(None, feeds)[0]
               for form in BERT_FORMS}
    for form in BERT_FORMS[1:]:
        np.testing.assert_allclose(outputs[form], outputs[BERT_FORMS[0]], atol=1e-4, rtol=1e-4)


def test_bert_dynamo_form_writes_out_layer_norm_and_gelu() -> None:
    model = bert_encoder(**BERT_SHAPE, form="dynamo")
    ops = _ops(model)
    assert model.opset_import[0].version == 18
    assert ops[:2] == ["Gather", "Add"]
    assert ops[2:11] == WRITTEN_LAYER_NORM  # the embedding LayerNorm
    layers = BERT_SHAPE["layers"]
    layer_norms = 1 + 2 * layers
    # Per layer: 6 linears and 2 attention MatMuls; the 6 biases, the mask, 2 residuals and
    # GELU's +1 are Adds, as are each LayerNorm's eps and beta and the position embedding.
    assert Counter(ops) == {
        "Gather": 1, "ReduceMean": 2 * layer_norms, "Sub": layer_norms, "Pow": layer_norms,
        "Sqrt": layer_norms, "Erf": layers, "Softmax": layers, "MatMul": 8 * layers,
        "Reshape": 4 * layers, "Transpose": 4 * layers, "Div": layer_norms + 2 * layers,
        "Mul": layer_norms + 2 * layers, "Add": 1 + 2 * layer_norms + 10 * layers}
    erf = ops.index("Erf")
    assert ops[erf - 1:erf + 4] == WRITTEN_GELU
    reduce_means = [n for n in model.graph.node if n.op_type == "ReduceMean"]
    assert all(len(n.input) == 2 and "axes" not in {a.name for a in n.attribute}
               for n in reduce_means)


def test_bert_dynamo_form_drops_a_tiny_epsilon_as_the_exporter_does() -> None:
    tiny = _ops(bert_encoder(**BERT_SHAPE, form="dynamo", epsilon=1e-12))
    kept = _ops(bert_encoder(**BERT_SHAPE, form="torchscript", epsilon=1e-12))
    layer_norms = 1 + 2 * BERT_SHAPE["layers"]
    assert Counter(kept)["Add"] - Counter(tiny)["Add"] == layer_norms
    assert tiny[2:10] == [op for i, op in enumerate(WRITTEN_LAYER_NORM) if i != 4]


def test_bert_torchscript_form_uses_constant_nodes_and_axes_attributes() -> None:
    model = bert_encoder(**BERT_SHAPE, form="torchscript")
    assert model.opset_import[0].version == 17
    assert _ops(model, constants=True)[2:4] == ["ReduceMean", "Sub"]
    assert Counter(_ops(model, constants=True))["Constant"] > 0
    for node in model.graph.node:
        if node.op_type == "ReduceMean":
            assert len(node.input) == 1 and node.attribute[0].name == "axes"
    assert _ops(model) == _ops(bert_encoder(**BERT_SHAPE, form="dynamo"))


def test_bert_dynamo_opset20_form_uses_layer_normalization_and_gelu_ops() -> None:
    model = bert_encoder(**BERT_SHAPE, form="dynamo_opset20")
    ops = Counter(_ops(model))
    assert model.opset_import[0].version == 20
    assert ops["LayerNormalization"] == 5 and ops["Gelu"] == 2
    assert not {"ReduceMean", "Erf", "Sqrt", "Pow"} & set(ops)


def test_bert_encoder_refuses_unknown_form_and_uneven_heads() -> None:
    with pytest.raises(ValueError, match="unknown BERT form 'onnx'"):
        bert_encoder(form="onnx")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        bert_encoder(hidden=64, heads=3)
