"""A third backend and a third float precision are one registration each (tests/support/stand_in.py):
job configs take them and refuse them with their specs' reasons, their jobs are routed by their
spec's queue, and a search plans their candidates from their specs, with no code naming them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from core.job_config import JobConfig
from core.queues import backend_queues, job_queue, queue_for
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import PRECISIONS, Precision
from optimizer.search.candidates import plan_search
from tests.support.stand_in import (
    HALF,
    STAND_IN,
    STAND_IN_BF16,
    register,
    registered,
    unregister,
)


@pytest.fixture(autouse=True)
def stand_in() -> Iterator[None]:
    with registered():
        yield


def _refusal(**config: object) -> str:
    with pytest.raises(ValidationError) as refused:
        JobConfig.model_validate(config)
    [error] = refused.value.errors()
    return str(error["msg"])


def test_a_job_on_the_stand_in_at_the_stand_in_precision_is_accepted() -> None:
    config = JobConfig.model_validate({"backend": "stand-in", "precision": "half",
                                       "ort_intra_op_threads": 2})

    assert config.backend == STAND_IN and isinstance(config.backend, Backend)
    assert config.precision == HALF and isinstance(config.precision, Precision)
    assert config.model_dump(mode="json")["backend"] == "stand-in"
    assert JobConfig.model_validate_json(config.model_dump_json()) == config


def test_int8_on_the_stand_in_takes_the_quantization_rules_of_its_precision() -> None:
    config = JobConfig.model_validate({"backend": "stand-in", "precision": "int8",
                                       "quantization": {"mode": "dynamic"}})
    assert config.quantization is not None

    assert _refusal(backend="stand-in", precision="int8",
                    quantization={"mode": "static"}).startswith("quantization.calibration:")


def test_what_the_stand_in_does_not_run_is_refused_with_its_specs_reason() -> None:
    refusal = _refusal(backend="stand-in", precision="bf16")

    assert STAND_IN_BF16 in refusal
    assert "Use fp32 or half or int8 with stand-in" in refusal
    assert "applies to backend 'tensorrt' only" in _refusal(backend="stand-in", target_gpu="9.0")


def test_the_stand_in_precision_is_refused_on_backends_that_do_not_run_it() -> None:
    refusal = _refusal(backend="onnxruntime", precision="half")

    assert "half needs backend 'stand-in'" in refusal
    assert "backend 'onnxruntime' does not run it" in refusal


def test_once_unregistered_they_are_unknown_names_again() -> None:
    unregister()
    try:
        assert "stand-in" not in BACKENDS and "half" not in PRECISIONS
        assert "'stand-in'" not in _refusal(backend="stand-in").split("should be")[1]
        with pytest.raises(ValueError, match="is not a valid Precision"):
            Precision("half")
    finally:
        register()


def test_its_jobs_go_to_its_specs_queue() -> None:
    assert job_queue(JobConfig.model_validate({"backend": "stand-in"})) == "cpu"
    assert queue_for("stand-in", None) == "cpu"
    unregister()
    try:
        declared = backend_queues()
    finally:
        register()
    assert backend_queues() == declared  # it shares the CPU workers' queue


def test_a_search_plans_the_stand_in_precision_and_int8_from_their_specs() -> None:
    config = JobConfig.model_validate({
        "backend": "stand-in", "search": {"backends": ["stand-in", "onnxruntime"],
                                          "pass_sets": False}})

    plan = plan_search(config.search_spaces(has_calibration=True))

    names = [c.name for c in plan.candidates]
    # A float contender first, then its spec's precision order (int8 first, half last) with
    # both int8 forms (int8 has a dynamic form); the ONNX Runtime options it took (threads)
    # from its spec's options.
    own = [name for name in names if name.startswith("stand-in:")]
    assert own[:3] == ["stand-in:fp32/all", "stand-in:int8-static/all",
                       "stand-in:int8-dynamic/all"]
    assert names[0] == own[0]  # the job's own backend takes the first turn
    assert "stand-in:half/all" in names
    assert {c.backend for c in plan.candidates if c.name.startswith("stand-in:")} == {STAND_IN}
    assert [c.precision for c in plan.candidates if c.name == "stand-in:half/all"] == [HALF]
    # ONNX Runtime, beside it, does not run half: its own order has no place for it.
    assert "onnxruntime:fp16/all" in names
    assert not [c for c in plan.candidates if c.name.startswith("onnxruntime:half")]


def test_a_search_asked_for_half_on_both_backends_refuses_it_where_it_does_not_run() -> None:
    config = JobConfig.model_validate({
        "backend": "stand-in", "search": {"backends": ["stand-in", "onnxruntime"],
                                          "precisions": ["half", "fp16"]}})

    plan = plan_search(config.search_spaces(has_calibration=False))

    assert [c.name for c in plan.candidates] == ["stand-in:half/all", "onnxruntime:fp16/all"]
    assert {r.name: r.reason for r in plan.refused} == {
        "stand-in:fp16": "backend 'stand-in' does not run fp16.",
        "onnxruntime:half": "backend 'onnxruntime' does not run half."}
