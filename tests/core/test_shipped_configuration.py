"""What a job shipped, as its benchmark records are keyed and its history describes it: the
request corrected by the run's reports (quantization's verdict, the passes that ran, a
fallback's ONNX Runtime level, a search's winner)."""

from core.job_config import JobConfig
from core.shipped_configuration import named_passes, resolved_passes, shipped_configuration

INT8 = JobConfig.model_validate({"precision": "int8", "quantization": {"mode": "auto"}})


def test_a_job_without_reports_is_described_by_its_request() -> None:
    shipped = shipped_configuration(INT8, {})
    assert shipped["precision"] == "int8" and shipped["quantization_mode"] == "auto"
    assert shipped["passes"] == resolved_passes(INT8)  # "all" resolved: the same as its list


def test_int8_asked_fp32_shipped_is_an_fp32_configuration_without_a_mode() -> None:
    reports = {"accuracy_report": {"quantization": {
        "shipped": "fp32", "why": "no MatMul/Conv to quantize", "chosen": None}}}
    shipped = shipped_configuration(INT8, reports)
    assert shipped["precision"] == "fp32" and shipped["quantization_mode"] is None
    assert shipped == {**shipped_configuration(JobConfig(), {}),
                       "passes": shipped_configuration(INT8, {})["passes"]}


def test_the_mode_chosen_and_the_passes_run_are_what_shipped() -> None:
    reports = {"accuracy_report": {"quantization": {"shipped": "int8", "chosen": {
                   "mode": "dynamic", "flavour": "s8s8", "method": None, "label": "dynamic"}},
                                   "fallback": {"ort_optimization_level": "basic"}},
               "fusion_report": {"passes_run": ["cleanup"], "excluded_rules": ["FuseGelu"]}}
    shipped = shipped_configuration(INT8, reports)
    assert shipped["quantization_mode"] == "dynamic"
    assert shipped["passes"] == ["cleanup"] and shipped["excluded_rules"] == ["FuseGelu"]
    assert shipped["ort_optimization_level"] == "basic"  # the fallback's, not the request's


def test_a_search_job_shipped_its_winners_recipe() -> None:
    search = JobConfig.model_validate({"search": {"time_budget_s": 300}})
    reports = {"search_report": {"winner": "fp32/none", "recipe": {
        "backend": "onnxruntime", "precision": "fp32", "passes": "none",
        "ort_intra_op_threads": 1}}}
    shipped = shipped_configuration(search, reports)
    assert shipped["passes"] == [] and shipped["ort_intra_op_threads"] == 1
    assert named_passes(JobConfig(passes="none"), shipped["passes"]) == "none"
    assert named_passes(JobConfig(), ["cleanup"]) == ["cleanup"]


def test_the_threads_compare_alike_under_either_name() -> None:
    by_ort_name = shipped_configuration(JobConfig(ort_intra_op_threads=2), {})
    by_neutral_name = shipped_configuration(JobConfig(intra_op_threads=2), {})
    assert by_ort_name == by_neutral_name and by_ort_name["ort_intra_op_threads"] == 2
