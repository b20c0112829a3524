"""core/job_config.py's rules between fields read the backend and precision registries: a job
option or precision a backend's spec does not list is refused, with that backend's reason."""

import dataclasses
import uuid
from collections.abc import Iterator
from types import MappingProxyType

import pytest
from pydantic import ValidationError

from core import job_config
from core.job_config import Backend, JobConfig, Precision
from optimizer.registries.backends import BACKENDS
from optimizer.registries.quantization import FLAVOURS

_OPTION_VALUES = {"target_gpu": "9.0", "profiles": {"x": {"min": [1], "opt": [1], "max": [1]}},
                  "ort_optimization_level": "basic", "ort_flush_denormals": True,
                  "ort_intra_op_threads": 2, "intra_op_threads": 2}


def _refusal(**fields: object) -> str:
    with pytest.raises(ValidationError) as caught:
        JobConfig.model_validate(fields)
    return str(caught.value.errors()[0]["msg"])


def test_backend_and_precision_are_the_optimizers_enums() -> None:
    config = JobConfig.model_validate({"backend": "tensorrt", "precision": "bf16"})
    assert config.backend is Backend.TENSORRT and config.precision is Precision.BF16
    assert config.model_dump(mode="json")["backend"] == "tensorrt"
    assert JobConfig().backend is Backend.ONNXRUNTIME


def test_an_unknown_backend_is_refused_naming_the_known_ones() -> None:
    assert _refusal(backend="coreml") == ("Input should be "
                                          f"{', '.join(repr(str(b)) for b in list(Backend)[:-1])} "
                                          f"or {str(list(Backend)[-1])!r}")


@pytest.mark.parametrize("backend", list(Backend))
def test_each_backend_takes_its_own_options_and_refuses_the_others(backend: Backend) -> None:
    spec = BACKENDS[backend]
    assert set(_OPTION_VALUES) == set(job_config._BACKEND_OPTIONS)
    for option, value in _OPTION_VALUES.items():
        fields = {"backend": backend, option: value}
        if option in spec.options:
            JobConfig.model_validate(fields)
            continue
        message = _refusal(**fields)
        assert message.startswith(f"{option}: applies to backend "), message
        assert spec.why_not[option] in message and f"Drop {option}" in message


@pytest.mark.parametrize("backend", list(Backend))
def test_each_backend_takes_the_precisions_its_spec_lists(backend: Backend) -> None:
    spec = BACKENDS[backend]
    for precision in Precision:
        if precision in spec.precisions:
            # fp8, and int8 on a backend whose flavours have none, have no dynamic form: valid
            # with a calibration dataset.
            static_only = precision == Precision.FP8 or not all(
                FLAVOURS[flavour].runs_dynamic_form
                for flavour in spec.quant_flavours.get(precision, ()))
            calibration = ({"quantization": {"calibration": str(uuid.uuid4())}}
                           if static_only else {})
            JobConfig.model_validate({"backend": backend, "precision": precision, **calibration})
        else:
            message = _refusal(backend=backend, precision=precision)
            assert message.startswith(f"precision: {precision} needs backend "), message


@pytest.fixture
def registry_without_bf16_on_tensorrt(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as if TensorRT lost bf16: the rule must follow it, not a branch of its own."""
    trt = BACKENDS[Backend.TENSORRT]
    changed = {**BACKENDS, Backend.TENSORRT: dataclasses.replace(
        trt, precisions=(Precision.FP32, Precision.FP16),
        precision_order=(Precision.FP16, Precision.FP32))}
    monkeypatch.setattr(job_config, "BACKENDS", MappingProxyType(changed))
    monkeypatch.setattr("optimizer.registries.backends.BACKENDS", MappingProxyType(changed))
    yield


@pytest.mark.usefixtures("registry_without_bf16_on_tensorrt")
def test_the_precision_rule_reads_the_registry() -> None:
    message = _refusal(backend="tensorrt", precision="bf16")
    others = [repr(str(b)) for b in BACKENDS if b != Backend.TENSORRT
              and Precision.BF16 in BACKENDS[b].precisions]
    assert message.startswith(f"precision: bf16 needs backend {' or '.join(others) or 'none'};"), \
        message


def test_precision_search_names_the_precisions_it_can_search() -> None:
    message = _refusal(precision_search=True)
    assert message == ("precision_search: there is nothing to search at fp32; set precision to "
                       "one it converts to: fp16 ('onnxruntime' or 'tensorrt'), bf16 ('tensorrt')")


def test_precision_search_is_refused_where_the_runtime_computes_the_precision() -> None:
    message = _refusal(backend="openvino", precision="bf16", precision_search=True)
    assert message.startswith("precision_search: backend 'openvino' computes bf16 from the fp32 "
                              "graph itself"), message


def test_int8_whose_flavours_have_no_dynamic_form_needs_a_calibration_dataset() -> None:
    message = _refusal(backend="openvino", precision="int8")
    assert message.startswith("quantization.calibration: int8 on backend 'openvino' needs a "
                              "calibration dataset"), message
    calibrated = {"calibration": str(uuid.uuid4())}
    message = _refusal(backend="openvino", precision="int8",
                       quantization={**calibrated, "mode": "dynamic"})
    assert message == ("quantization.mode: int8 on backend 'openvino' has no dynamic form; use "
                       "'static' or 'auto'"), message
    JobConfig.model_validate({"backend": "openvino", "precision": "int8",
                              "quantization": calibrated})


def test_intra_op_threads_and_its_onnx_runtime_name_are_one_option() -> None:
    assert JobConfig(intra_op_threads=2).cpu_threads == 2
    assert JobConfig(ort_intra_op_threads=3).cpu_threads == 3
    assert JobConfig(backend=Backend.OPENVINO, intra_op_threads=1).cpu_threads == 1
    message = _refusal(intra_op_threads=2, ort_intra_op_threads=2)
    assert message.startswith("intra_op_threads: ort_intra_op_threads is the same option"), \
        message
    message = _refusal(backend="openvino", ort_intra_op_threads=2)
    assert "backend 'openvino' takes intra_op_threads" in message, message


def test_the_ort_level_default_applies_to_backends_taking_that_option() -> None:
    assert JobConfig(backend=Backend.ONNXRUNTIME).ort_optimization_level == "all"
    assert JobConfig(backend=Backend.TENSORRT).ort_optimization_level is None
