"""A search of several backends (search.backends): the job's backend runs it, so every other
must build on its workers; each candidate's config keeps only the options its backend takes.
A CPU search naming none tries every CPU backend its worker runs (a stand-in third one here)."""

import pytest
from pydantic import ValidationError

from core.job_config import Backend, JobConfig
from optimizer.capabilities import GpuInfo
from tests.support.race_stand_in import STAND_IN_CPU, HostWithStandIn, patch_stand_in

_PROFILE = {"x": {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [8, 3, 8, 8]}}


def _refusal(**fields: object) -> str:
    with pytest.raises(ValidationError) as caught:
        JobConfig.model_validate(fields)
    return str(caught.value.errors()[0]["msg"])


def test_a_cpu_search_cannot_try_tensorrt_and_the_message_says_where_it_can() -> None:
    message = _refusal(search={"backends": ["onnxruntime", "tensorrt"]})
    assert message.startswith("search.backends: 'tensorrt' needs an NVIDIA GPU and TensorRT")
    assert "set backend to 'tensorrt'" in message


def test_search_backends_must_hold_the_jobs_backend_once() -> None:
    assert _refusal(backend="tensorrt", search={"backends": ["onnxruntime"]}).startswith(
        "search.backends: the job's backend 'tensorrt' must be one of them")
    assert _refusal(backend="tensorrt", search={"backends": ["tensorrt", "tensorrt"]}) == (
        "search.backends: name each backend once")


def test_options_and_precisions_are_checked_against_every_backend_searched() -> None:
    # onnxruntime's options are refused on a tensorrt search that does not try onnxruntime...
    assert _refusal(backend="tensorrt", ort_intra_op_threads=2, search={}).startswith(
        "ort_intra_op_threads: applies to backend 'onnxruntime' only, and this search tries "
        "'tensorrt'")
    assert _refusal(backend="tensorrt", search={"threads": [1]}).startswith("search.threads:")
    # ...and taken on one that does
    both = JobConfig.model_validate({"backend": "tensorrt", "ort_intra_op_threads": 2,
                                     "search": {"backends": ["tensorrt", "onnxruntime"],
                                                "ort_levels": ["basic"]}})
    assert both.searched_backends() == [Backend.TENSORRT, Backend.ONNXRUNTIME]
    assert _refusal(search={"precisions": ["fp8"]}).startswith(
        "search.precisions: backend 'onnxruntime' does not build fp8")


def test_each_backend_gets_its_own_search_space() -> None:
    config = JobConfig.model_validate({
        "backend": "tensorrt", "target_gpu": "9.0",
        "search": {"backends": ["tensorrt", "onnxruntime"], "threads": [1, 2]}})
    gpu, cpu = config.search_spaces(has_calibration=False)
    assert (gpu.backend, gpu.threads, gpu.target_gpu) == (Backend.TENSORRT, None, "9.0")
    assert (cpu.backend, cpu.threads, cpu.target_gpu) == (Backend.ONNXRUNTIME, (1, 2), None)


def test_an_onnxruntime_candidate_of_a_tensorrt_search_drops_the_gpu_options() -> None:
    config = JobConfig.model_validate({
        "backend": "tensorrt", "target_gpu": "9.0", "profiles": _PROFILE,
        "ort_intra_op_threads": 1, "search": {"backends": ["tensorrt", "onnxruntime"]}})
    cpu = config.candidate_config({"backend": "onnxruntime", "precision": "fp32",
                                   "passes": "all", "ort_optimization_level": "all"})
    assert cpu.backend is Backend.ONNXRUNTIME and cpu.search is None
    assert (cpu.target_gpu, cpu.profiles, cpu.cpu_threads) == (None, None, 1)
    # the profile's opt shape is the shape the search validates and times at
    assert cpu.input_shapes == {"x": [4, 3, 8, 8]}
    gpu = config.candidate_config({"backend": "tensorrt", "precision": "fp16", "passes": "all"})
    assert (gpu.target_gpu, gpu.ort_intra_op_threads) == ("9.0", None)
    assert gpu.profiles is not None and gpu.profiles["x"].opt == [4, 3, 8, 8]


def test_a_cpu_search_naming_no_backends_tries_every_cpu_backend_its_worker_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stand_in(monkeypatch)
    config = JobConfig.model_validate({"search": {"threads": [1]}})
    # Validated without a worker: its own backend only.
    assert config.searched_backends() == [Backend.ONNXRUNTIME]
    # On a worker with the stand-in's library: both, its own first; without it: its own.
    assert config.searched_backends(HostWithStandIn()) == [Backend.ONNXRUNTIME, STAND_IN_CPU]
    assert config.searched_backends(HostWithStandIn(has_stand_in=False)) == [
        Backend.ONNXRUNTIME]
    own, other = config.search_spaces(has_calibration=True, capabilities=HostWithStandIn())
    assert (other.backend, other.threads, other.has_calibration) == (STAND_IN_CPU, (1,), True)
    assert own.backend is Backend.ONNXRUNTIME


def test_search_backends_still_narrows_a_cpu_search_and_a_gpu_search_races_only_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    patch_stand_in(monkeypatch)
    host = HostWithStandIn(gpus=(GpuInfo(0, "NVIDIA H100", "9.0", 81559),),
                           tensorrt_version="10.0")
    narrowed = JobConfig.model_validate({"search": {"backends": ["onnxruntime"]}})
    assert narrowed.searched_backends(host) == [Backend.ONNXRUNTIME]
    gpu = JobConfig.model_validate({"backend": "tensorrt", "search": {}})
    assert gpu.searched_backends(host) == [Backend.TENSORRT]
