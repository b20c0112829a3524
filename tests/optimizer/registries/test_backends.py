"""The backend and precision registries: every name has a spec, every spec points at code that
exists, and the vocabulary loads no backend library."""

import subprocess
import sys
from dataclasses import replace

import pytest

from optimizer.capabilities import HostCapabilities
from optimizer.passes import DEFAULT_PASSES
from optimizer.registries.backends import BACKENDS, Backend, QueueKind, backends_for, load_dotted
from optimizer.registries.precisions import PRECISIONS, REFERENCE_PRECISION, Precision, reduced_precisions
from optimizer.registries.quantization import QuantFlavour


def test_every_backend_has_a_spec_named_after_it() -> None:
    assert list(BACKENDS) == list(Backend)
    for name, spec in BACKENDS.items():
        assert spec.name is name and spec.label
        assert spec.needs_gpu == (spec.queue is QueueKind.GPU)


def test_every_precision_has_a_spec_and_a_backend_that_runs_it() -> None:
    assert list(PRECISIONS) == list(Precision)
    for name, spec in PRECISIONS.items():
        assert spec.name is name and spec.hardware
        assert backends_for(name), name
        assert {"atol", "rtol", "min_cosine"} <= set(spec.tolerances)
    assert not PRECISIONS[REFERENCE_PRECISION].converts
    assert REFERENCE_PRECISION not in reduced_precisions()


def test_every_backend_runs_the_reference_precision() -> None:
    # Validation compares an engine with the fp32 original; a backend needs at least that.
    for spec in BACKENDS.values():
        assert REFERENCE_PRECISION in spec.precisions


def test_the_onnxruntime_specs_code_paths_resolve() -> None:
    # TensorRT's cannot be imported here; tests/optimizer/backends/tensorrt checks its modules.
    spec = BACKENDS[Backend.ONNXRUNTIME]
    assert callable(getattr(load_dotted(spec.runner), "infer", None))
    assert callable(load_dotted(spec.engine_builder))


@pytest.mark.parametrize("name", list(Backend))
def test_specs_code_paths_name_modules_inside_the_backends_package(name: Backend) -> None:
    spec = BACKENDS[name]
    for path in (spec.runner, spec.engine_builder):
        module, _, attribute = path.partition(":")
        assert module.startswith(f"optimizer.backends.{name}.") and attribute, path


def test_why_not_explains_only_what_the_backend_lacks() -> None:
    for spec in BACKENDS.values():
        for key in spec.why_not:
            assert key not in spec.options and key not in spec.precisions, (spec.name, key)


def test_every_pass_rewrites_only_for_known_backends() -> None:
    for fusion_pass in DEFAULT_PASSES:
        assert set(fusion_pass.rules) <= set(Backend), fusion_pass.name
        assert set(fusion_pass.off_by_default) <= set(Backend), fusion_pass.name


def test_importing_the_vocabulary_loads_no_backend_or_numpy() -> None:
    code = ("import sys, optimizer.registries.backends, optimizer.registries.precisions; "
            "print(sorted(m for m in ('numpy', 'onnx', 'onnxruntime', 'tensorrt') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_each_host_check_is_a_host_capability() -> None:
    for spec in BACKENDS.values():
        if spec.host_check is not None:
            assert isinstance(getattr(HostCapabilities, spec.host_check), property), spec.name
    bare = HostCapabilities()
    assert [spec.name for spec in BACKENDS.values() if spec.runs_on(bare)] == [Backend.ONNXRUNTIME]


def test_a_backend_whose_precision_order_misses_a_precision_is_refused() -> None:
    onnxruntime = BACKENDS[Backend.ONNXRUNTIME]
    with pytest.raises(ValueError, match="precision_order .* must list each of its precisions"):
        replace(onnxruntime, precision_order=(Precision.INT8, Precision.FP32))


def test_a_backend_running_a_quantized_precision_without_flavours_is_refused() -> None:
    tensorrt = BACKENDS[Backend.TENSORRT]
    with pytest.raises(ValueError, match="runs fp8 but names no quant_flavours"):
        replace(tensorrt, quant_flavours={Precision.INT8: (QuantFlavour.TENSORRT,)})
    for spec in BACKENDS.values():
        assert set(spec.quant_flavours) == {p for p in spec.precisions if PRECISIONS[p].quantizes}


def test_models_are_load_checked_at_the_engines_level_only_where_onnxruntime_runs_it() -> None:
    onnxruntime, tensorrt = BACKENDS[Backend.ONNXRUNTIME], BACKENDS[Backend.TENSORRT]
    assert onnxruntime.model_check_level(None) == "all"
    assert onnxruntime.model_check_level("basic") == "basic"
    assert onnxruntime.times_quantized_candidates and not tensorrt.times_quantized_candidates
    assert tensorrt.model_check_level("basic") == "disabled"
    stand_in = replace(onnxruntime, name="stand-in", ort_runs_engines=False, node_precisions=None)
    assert stand_in.model_check_level("extended") == "disabled"
    assert not stand_in.times_quantized_candidates


def test_every_node_precisions_reader_resolves() -> None:
    for spec in BACKENDS.values():
        if spec.node_precisions is not None:
            assert callable(load_dotted(spec.node_precisions))
