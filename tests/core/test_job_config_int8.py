"""The job config's int8 rules and the precision registry's GPU floor, without a server."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from core.job_config import JobConfig
from optimizer.registries.precisions import PRECISIONS, Precision

DATASET = str(uuid.uuid4())


def _refusal(**config: object) -> str:
    with pytest.raises(ValidationError) as caught:
        JobConfig.model_validate(config)
    return str(caught.value.errors()[0]["msg"])


def test_int8_defaults_to_auto_and_takes_a_calibration_dataset() -> None:
    config = JobConfig.model_validate({"precision": "int8",
                                       "quantization": {"calibration": DATASET}})
    assert config.quantization is not None and config.quantization.mode == "auto"
    assert config.quantization.method == "auto" and config.quantization.per_channel is True


@pytest.mark.parametrize(("config", "start"), [
    ({"precision": "int8", "quantization": {"mode": "static"}}, "quantization.calibration:"),
    ({"precision": "int8", "dataset_id": DATASET,
      "quantization": {"mode": "static", "calibration": DATASET}}, "quantization.calibration:"),
    ({"precision": "int8", "quantization": {"mode": "dynamic", "calibration": DATASET}},
     "quantization.calibration:"),
    ({"precision": "fp16", "quantization": {"mode": "dynamic"}}, "quantization:"),
    ({"precision": "fp32", "accuracy_budget": {"max_accuracy_drop": 0.01}},
     "accuracy_budget.max_accuracy_drop:"),
    ({"backend": "tensorrt", "precision": "bf16", "target_gpu": "7.5"}, "target_gpu:"),
])
def test_int8_and_gpu_rules_refuse_naming_the_field(config: dict[str, object],
                                                    start: str) -> None:
    assert _refusal(**config).startswith(start)


def test_a_precision_says_which_gpus_lack_its_kernels() -> None:
    bf16 = PRECISIONS[Precision.BF16]
    assert bf16.gpu_refusal("9.0") is None and bf16.gpu_refusal(None) is None
    assert "8.0 or later" in (bf16.gpu_refusal("7.5") or "")
    assert PRECISIONS[Precision.INT8].gpu_refusal("6.1") is None


def test_an_int8_budget_keeps_the_limits_given_and_takes_int8_defaults_for_the_rest() -> None:
    default = JobConfig.model_validate({"precision": "int8"}).accuracy_budget
    assert (default.min_cosine, default.min_top1_agreement) == (0.99, 0.99)
    given = JobConfig.model_validate({"precision": "int8",
                                      "accuracy_budget": {"min_top1_agreement": 0.95}})
    assert (given.accuracy_budget.min_cosine, given.accuracy_budget.min_top1_agreement) == (
        0.99, 0.95)
    # Stored and read back by the worker: the same budget, not precision_search's 0.999.
    stored = JobConfig.model_validate(given.model_dump(mode="json"))
    assert stored.accuracy_budget == given.accuracy_budget
    assert JobConfig.model_validate({"precision": "fp16"}).accuracy_budget.min_cosine == 0.999
