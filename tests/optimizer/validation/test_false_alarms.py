"""False alarms stay rare: the unchanged model and correct fusions pass the full verdict (every
limit of the fp32 tolerances) on 20 random seeds each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.testing.models import small_cnn
from optimizer.testing.real_models import bert_encoder
from optimizer.validation import default_tolerances, validate

SEEDS = range(20)
MODELS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "small_cnn": lambda seed: small_cnn(seed=seed),
    "bert_encoder": lambda seed: bert_encoder(layers=1, hidden=64, heads=2, seq=16, seed=seed),
}


def _static(model: onnx.ModelProto) -> onnx.ModelProto:
    return fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))


@pytest.mark.parametrize("name", MODELS)
def test_correct_fusions_and_the_unchanged_model_pass_on_20_seeds(name: str, tmp_path: Path) -> None:
    tolerances = default_tolerances("fp32")
    failures = []
    for seed in SEEDS:
        original = _static(MODELS[name](seed))
        fused, _ = optimize_model(original, OptimizeOptions())
        paths = {"original": tmp_path / f"{seed}.onnx", "fused": tmp_path / f"{seed}.fused.onnx"}
        onnx.save(original, paths["original"])
        onnx.save(fused, paths["fused"])
        ranges = {"input_ids": (0, 1000)} if name == "bert_encoder" else None
        feeds = random_feeds(summarize_model(original).inputs, count=2, seed=seed, ranges=ranges)
        with (
            OnnxRuntimeRunner(paths["original"]) as reference,
            OnnxRuntimeRunner(paths["original"], optimization_level="all") as unchanged,
            OnnxRuntimeRunner(paths["fused"]) as candidate,
        ):
            for label, runner in (("unchanged@all", unchanged), ("fused", candidate)):
                report = validate(reference, runner, feeds, tolerances)
                if not report.passed:
                    failures.append((seed, label, [f.message for f in report.failures]))
    assert failures == []
