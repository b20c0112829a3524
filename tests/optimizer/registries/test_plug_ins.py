"""Registering a backend or precision at run time: the names it adds behave as the declared ones
(strings on the wire, pickled by value, valid while registered), every reader of the registry
sees it, and a conflicting or unknown registration is refused saying why."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from optimizer.registries.backends import (
    BACKENDS,
    Backend,
    BackendSpec,
    backends_for,
    register_backend,
    unregister_backend,
)
from optimizer.registries.plug_ins import plug_in_member
from optimizer.registries.precisions import (
    PRECISIONS,
    Precision,
    reduced_precisions,
    register_precision,
    unregister_precision,
)
from optimizer.validation.tolerances import default_tolerances
from tests.support.stand_in import HALF, HALF_SPEC, STAND_IN, registered, stand_in_spec


def test_a_plug_in_name_is_its_string_and_pickles_by_value() -> None:
    assert HALF == "half" and hash(HALF) == hash("half") and str(HALF) == "half"
    assert isinstance(HALF, Precision) and HALF.name == "HALF" and HALF.value == "half"
    assert STAND_IN.name == "STAND_IN"
    assert list(Backend) == [Backend.ONNXRUNTIME, Backend.TENSORRT, Backend.OPENVINO]  # declared only
    with registered():
        assert Precision("half") is HALF and Backend("stand-in") is STAND_IN
        assert pickle.loads(pickle.dumps(HALF)) is HALF


def test_every_reader_of_the_registries_sees_what_is_registered() -> None:
    with registered():
        assert list(BACKENDS)[-1] == STAND_IN and PRECISIONS[HALF] is HALF_SPEC
        assert backends_for("half") == (STAND_IN,)
        assert STAND_IN in backends_for("ort_intra_op_threads")
        assert HALF in reduced_precisions()
        assert default_tolerances("half").min_cosine == HALF_SPEC.tolerances["min_cosine"]
    assert STAND_IN not in BACKENDS and HALF not in PRECISIONS
    assert HALF not in reduced_precisions()


def test_registering_an_equal_spec_again_does_nothing_and_another_is_refused() -> None:
    with registered():
        register_precision(HALF_SPEC)
        register_backend(stand_in_spec())
        with pytest.raises(ValueError, match="precision 'half' is registered already, with another one"):
            register_precision(replace(HALF_SPEC, fidelity=10))
        with pytest.raises(ValueError, match="'stand-in' is registered already"):
            register_backend(replace(stand_in_spec(), label="Other"))


def test_a_declared_name_cannot_be_made_again_or_unregistered() -> None:
    with pytest.raises(ValueError, match="'fp16' is already a Precision"):
        plug_in_member(Precision, "fp16")
    with pytest.raises(ValueError, match="backend 'tensorrt' was not registered at run time"):
        unregister_backend(Backend.TENSORRT)
    with pytest.raises(ValueError, match="was not registered at run time"):
        unregister_precision(Precision.FP8)
    with pytest.raises(ValueError, match="was not registered"):
        unregister_backend(STAND_IN)


def test_a_backend_running_an_unregistered_precision_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="backend 'stand-in' runs half, which no PrecisionSpec "
                                         "declares: register_precision it first"):
        stand_in_spec()


def test_the_stand_ins_facts_are_its_specs() -> None:
    with registered():
        spec = BACKENDS[STAND_IN]
        assert isinstance(spec, BackendSpec) and spec.queue_name == "cpu"
        assert spec.quantized_precisions == (Precision.INT8,)
        assert spec.ort_runs_engines
        assert spec.quant_flavours == BACKENDS[Backend.ONNXRUNTIME].quant_flavours
