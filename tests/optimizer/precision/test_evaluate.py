"""evaluate_precision: the planted float16 LayerNorm overflow is caught, the keep-list repairs it,
and ordinary models stay within the precision's default tolerances."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest

from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import summarize_model
from optimizer.precision import (
    DEFAULT_KEEP,
    EMULATED,
    NO_KEEP,
    KeepPolicy,
    PrecisionEvaluation,
    convert_precision,
    evaluate_precision,
    model_runner,
    run_outputs,
)
from optimizer.testing import models, real_models
from optimizer.validation.compare import compare_outputs
from optimizer.validation.tolerances import default_tolerances
from tests.optimizer.precision.models import loud_layer_norm

SMALL_MODELS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "small_cnn": lambda seed: models.small_cnn(seed=seed, batch=2),
    "mlp": lambda seed: models.mlp(seed=seed),
    "bert_encoder": lambda seed: real_models.bert_encoder(layers=2, hidden=64, heads=2, seq=16,
                                                          seed=seed),
    "bert_encoder_torchscript": lambda seed: real_models.bert_encoder(
        layers=2, hidden=64, heads=2, seq=16, seed=seed, form="torchscript"),
    "bert_encoder_opset20": lambda seed: real_models.bert_encoder(
        layers=2, hidden=64, heads=2, seq=16, seed=seed, form="dynamo_opset20"),
}


def feeds_for(model: onnx.ModelProto, seed: int, count: int = 3) -> list[dict[str, np.ndarray]]:
    specs = summarize_model(model).inputs
    concrete = [type(s)(s.name, s.dtype, tuple(d if isinstance(d, int) else 2 for d in s.shape))
                for s in specs]
    return random_feeds(concrete, count=count, seed=seed)


def evaluate(model: onnx.ModelProto, precision: str, policy: KeepPolicy,
             seed: int = 0) -> PrecisionEvaluation:
    converted, _ = convert_precision(model, precision, keep_fp32=policy)  # type: ignore[arg-type]
    return evaluate_precision(model, converted, feeds_for(model, seed),
                              precision=precision)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["written", "op"])
def test_fp16_layer_norm_overflow_fails_without_keep_list_and_passes_with_it(form: str) -> None:
    model = loud_layer_norm(form, seed=3)  # type: ignore[arg-type]
    without = evaluate(model, "fp16", NO_KEEP)
    assert not without.passed
    (output,) = without.validation.outputs
    assert output.cosine_similarity < 0.9 and output.max_abs_err > 0.5
    with_list = evaluate(model, "fp16", DEFAULT_KEEP)
    assert with_list.passed, with_list.validation.to_dict()
    assert with_list.method == "emulated" and with_list.backend == EMULATED


@pytest.mark.parametrize("form", ["written", "op"])
def test_bf16_has_the_range_so_the_same_layer_norm_passes_even_without_keep_list(form: str) -> None:
    assert evaluate(loud_layer_norm(form), "bf16", NO_KEEP).passed  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "precision"), [
    (name, precision) for name in SMALL_MODELS for precision in ("fp16", "bf16")
    if not (name.startswith("bert_encoder") and name != "bert_encoder_opset20"
            and precision == "bf16")])  # see the next test
def test_default_conversion_stays_within_default_tolerances(name: str, precision: str) -> None:
    for seed in (0, 1):
        result = evaluate(SMALL_MODELS[name](seed), precision, DEFAULT_KEEP, seed=seed)
        assert result.passed, result.validation.to_dict()


def test_bf16_written_out_bert_is_within_the_cosine_floor() -> None:
    # bfloat16 keeps 8 significant bits: the written-out LayerNorm's last Mul and Add round its
    # output (values up to ~4, spacing 2**-5) twice more than LayerNormalization does, which
    # moves the worst element by about 0.05: within the cosine floor, and a small error still.
    for seed, form in ((0, "bert_encoder"), (1, "bert_encoder"), (0, "bert_encoder_torchscript")):
        result = evaluate(SMALL_MODELS[form](seed), "bf16", DEFAULT_KEEP, seed=seed)
        (output,) = result.validation.outputs
        assert output.cosine_similarity >= default_tolerances("bf16").min_cosine
        assert output.max_abs_err < 0.1 and output.mean_abs_err < 0.02


def test_a_real_backend_runner_is_used_when_given_and_reported() -> None:
    # Stands in for a GPU runner: onnxruntime running the float16 graph itself. Feeds are cast
    # to the runner's float16 inputs and its float16 outputs back to float32 for the verdict.
    model = models.mlp()
    converted, _ = convert_precision(model, "fp16", keep_io_types=False)
    feeds = feeds_for(model, seed=0)
    with model_runner(converted) as runner:
        assert {spec.dtype for spec in runner.inputs} == {"float16"}
        result = evaluate_precision(model, converted, feeds, precision="fp16", candidate=runner)
    assert result.method == "backend" and result.backend == "onnxruntime"
    assert result.passed
    assert result.to_dict()["validation"]["passed"] is True


def test_precomputed_reference_gives_the_same_verdict() -> None:
    model = loud_layer_norm("written")
    feeds = feeds_for(model, seed=0)
    reference = run_outputs(model, feeds)
    converted, _ = convert_precision(model, "fp16", keep_fp32=NO_KEEP)
    fresh = evaluate_precision(model, converted, feeds, precision="fp16")
    reused = evaluate_precision(model, converted, feeds, precision="fp16", reference=reference)
    assert fresh.validation.to_dict() == reused.validation.to_dict()


def test_verdict_matches_compare_outputs_with_fp16_defaults() -> None:
    model = loud_layer_norm("written")
    feeds = feeds_for(model, seed=0)
    converted, _ = convert_precision(model, "fp16")
    result = evaluate_precision(model, converted, feeds, precision="fp16")
    assert result.validation.tolerances == default_tolerances("fp16")
    # Loosening the tolerances is the caller's choice and changes nothing else.
    strict = default_tolerances("fp32")
    tight = evaluate_precision(model, converted, feeds, precision="fp16", tolerances=strict)
    assert tight.validation.tolerances == strict
    assert compare_outputs(run_outputs(model, feeds), run_outputs(model, feeds), strict).passed
