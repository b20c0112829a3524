"""The search's candidates come from the registries, likeliest winner first, and what cannot
run is refused with its reason; a default CPU search plans every CPU backend its worker runs."""

from dataclasses import replace
from types import MappingProxyType

import pytest

from core.job_config import JobConfig
from optimizer.passes import DEFAULT_PASSES
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import Precision
from optimizer.registries.quantization import QuantizationMode
from optimizer.search.candidates import SearchSpace, plan_candidates, plan_search
from tests.support.race_stand_in import STAND_IN_CPU, HostWithStandIn, patch_stand_in


def _names(space: SearchSpace) -> list[str]:
    return [c.name for c in plan_candidates(space).candidates]


def test_a_cpu_search_tries_a_float_contender_then_int8_and_refuses_static_without_a_dataset(
        ) -> None:
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME, pass_sets=False))
    # fp32/all builds in seconds; int8's accuracy search may take the rest of the time budget
    assert [c.name for c in plan.candidates] == ["fp32/all", "int8-dynamic/all", "fp16/all"]
    refused = {r.name: r.reason for r in plan.refused}
    assert "calibration dataset" in refused["int8-static"]


def test_with_a_calibration_dataset_int8_static_leads_the_quantized_and_its_recipe_names_the_mode(
        ) -> None:
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.FP32,
                           Precision.INT8), pass_sets=False, has_calibration=True,
                           has_matrix_products=False))
    assert [c.name for c in plan.candidates] == ["fp32/all", "int8-static/all"]
    first = plan.candidates[1]
    assert first.quantization_mode is QuantizationMode.STATIC
    assert first.overrides() == {"precision": "int8", "passes": "all",
                                 "quantization": {"mode": "static"},
                                 "ort_optimization_level": "all"}
    assert "MatMul/Gemm only" in {r.name: r.reason for r in plan.refused}["int8-dynamic"]


def test_a_precision_the_backend_lacks_is_refused_with_the_registry_reason() -> None:
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.BF16,
                                                                        Precision.FP32)))
    assert "bf16 kernels" in {r.name: r.reason for r in plan.refused}["bf16"]
    gpu = plan_candidates(SearchSpace(Backend.TENSORRT, precisions=(Precision.FP8,),
                                      has_calibration=True, target_gpu="7.5"))
    assert not gpu.candidates
    assert "8.9" in gpu.refused[0].reason


def test_only_the_families_that_rewrite_the_model_get_an_off_candidate() -> None:
    firing = ("fold_batch_norm", "fuse_conv_activation")
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.FP32,),
                                       firing_passes=firing))
    names = [c.name for c in plan.candidates]
    assert names == ["fp32/all", "fp32/without-fold_batch_norm",
                     "fp32/without-fuse_conv_activation", "fp32/none"]
    without_bn = plan.candidates[1]
    # The recipe keeps every pass "all" runs, the clean-up and the families that did not fire.
    assert "cleanup" in without_bn.passes and "fold_batch_norm" not in without_bn.passes
    assert "fuse_layer_norm" in without_bn.passes
    assert set(without_bn.passes) <= {p.name for p in DEFAULT_PASSES}


def test_ort_levels_asked_each_get_a_candidate() -> None:
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.FP32,),
                                       pass_sets=False, ort_levels=("all", "basic")))
    assert [(c.name, c.ort_level) for c in plan.candidates] == [
        ("fp32/all", "all"), ("fp32/all@ort-basic", "basic")]
    trt = plan_candidates(SearchSpace(Backend.TENSORRT, precisions=(Precision.FP32,),
                                      pass_sets=False, ort_levels=("basic",)))
    assert [(c.name, c.ort_level) for c in trt.candidates] == [("fp32/all", None)]


def test_thread_counts_asked_vary_each_precision_with_all_passes_only() -> None:
    plan = plan_candidates(SearchSpace(Backend.ONNXRUNTIME,
                                       precisions=(Precision.FP32, Precision.INT8),
                                       firing_passes=("fold_batch_norm",), threads=(1, 2)))
    names = [c.name for c in plan.candidates]

    assert names == ["fp32/all", "fp32/all@1t", "fp32/all@2t", "int8-dynamic/all",
                     "int8-dynamic/all@1t", "int8-dynamic/all@2t", "fp32/without-fold_batch_norm",
                     "fp32/none"]
    one = next(c for c in plan.candidates if c.name == "fp32/all@1t")
    assert one.overrides()["intra_op_threads"] == 1
    assert "intra_op_threads" not in plan.candidates[0].overrides()


def test_a_search_of_two_backends_names_each_candidate_after_its_backend() -> None:
    plan = plan_search([SearchSpace(Backend.TENSORRT, precisions=(Precision.FP16, Precision.BF16),
                                    pass_sets=False),
                        SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.FP16,
                                    Precision.BF16), pass_sets=False)])
    # the backends take turns, the job's own (first) first: each one's likeliest winner before
    # any one's second; a precision one backend lacks is refused for that backend only
    assert [c.name for c in plan.candidates] == [
        "tensorrt:fp16/all", "onnxruntime:fp16/all", "tensorrt:bf16/all"]
    assert "bf16 kernels" in {r.name: r.reason for r in plan.refused}["onnxruntime:bf16"]
    assert plan.candidates[1].overrides() == {"backend": "onnxruntime", "precision": "fp16",
                                              "passes": "all", "ort_optimization_level": "all"}
    # one backend: names and recipes as before, no backend in them
    alone = plan_search([SearchSpace(Backend.ONNXRUNTIME, precisions=(Precision.FP32,),
                                     pass_sets=False)])
    assert [(c.name, "backend" in c.overrides()) for c in alone.candidates] == [
        ("fp32/all", False)]


def test_the_search_tries_precisions_in_the_order_the_backend_spec_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in third backend (ONNX Runtime's spec under another name) that tries fp16 first.
    stand_in = replace(BACKENDS[Backend.ONNXRUNTIME], name="stand-in",
                       precision_order=(Precision.FP16, Precision.FP32, Precision.INT8))
    monkeypatch.setattr("optimizer.search.candidates.BACKENDS",
                        MappingProxyType({**BACKENDS, "stand-in": stand_in}))
    space = SearchSpace("stand-in", pass_sets=False)  # type: ignore[arg-type]
    assert _names(space) == ["fp16/all", "fp32/all", "int8-dynamic/all"]


def test_a_backend_whose_spec_takes_no_ort_level_gets_candidates_without_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = replace(BACKENDS[Backend.ONNXRUNTIME], name="stand-in", options=frozenset())
    monkeypatch.setattr("optimizer.search.candidates.BACKENDS",
                        MappingProxyType({**BACKENDS, "stand-in": stand_in}))
    space = SearchSpace("stand-in", precisions=(Precision.FP32,),  # type: ignore[arg-type]
                        pass_sets=False, ort_levels=("basic", "all"))
    assert [(c.name, c.ort_level) for c in plan_candidates(space).candidates] == [
        ("fp32/all", None)]


@pytest.mark.parametrize(("flags", "bf16_tried"), [
    (frozenset({"avx512_bf16"}), True), (frozenset(), False), (None, True)])
def test_bf16_on_a_cpu_backend_is_refused_where_the_workers_cpu_lacks_its_kernels(
        flags: frozenset[str] | None, bf16_tried: bool) -> None:
    plan = plan_candidates(SearchSpace(backend=Backend.OPENVINO, pass_sets=False,
                                       cpu_flags=flags))

    assert any(c.precision == Precision.BF16 for c in plan.candidates) is bf16_tried
    refused = {r.name: r.reason for r in plan.refused}
    assert ("bf16" in refused) is not bf16_tried
    if not bf16_tried:
        assert refused["bf16"].startswith("bf16 needs a CPU with amx_bf16 or avx512_bf16")
    assert any(c.precision == Precision.FP32 for c in plan.candidates)


def test_cpu_flags_refuse_nothing_on_a_gpu_backend() -> None:
    plan = plan_candidates(SearchSpace(backend=Backend.TENSORRT, pass_sets=False,
                                       cpu_flags=frozenset()))
    assert "bf16" not in {r.name for r in plan.refused}


def test_a_default_cpu_search_on_a_worker_with_a_third_cpu_backend_plans_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stand_in(monkeypatch)
    config = JobConfig.model_validate({"search": {"pass_sets": False, "threads": [1]}})
    plan = plan_search(config.search_spaces(has_calibration=False,
                                            capabilities=HostWithStandIn()))
    by_backend = {str(c.backend) for c in plan.candidates}
    assert by_backend == {"onnxruntime", "stand-in-cpu"}
    # the job's own first; each candidate named after its backend, its recipe building there
    assert plan.candidates[0].name.startswith("onnxruntime:")
    for candidate in plan.candidates:
        assert candidate.name.startswith(f"{candidate.backend}:")
        assert candidate.overrides()["backend"] == str(candidate.backend)
    at_one = next(c for c in plan.candidates if c.name == "stand-in-cpu:fp32/all@1t")
    assert at_one.backend == STAND_IN_CPU and at_one.overrides()["intra_op_threads"] == 1
