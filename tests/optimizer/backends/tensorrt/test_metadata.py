"""EngineMetadata round-trips through JSON; check_compatible refuses other TensorRT releases and
compute capabilities with a clear message."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from optimizer.backends.tensorrt.metadata import (
    EngineMetadata,
    GpuInfo,
    check_compatible,
    release_of,
)
from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec
from optimizer.errors import EngineBuildError, InternalError

H200 = GpuInfo("NVIDIA H200", "9.0", 150_000_000_000)
H100 = GpuInfo("NVIDIA H100 80GB HBM3", "9.0")
A100 = GpuInfo("NVIDIA A100-SXM4-80GB", "8.0")


def metadata(**changes: object) -> EngineMetadata:
    fields: dict[str, object] = dict(
        tensorrt_version="10.16.1.11", gpu_name=H200.name, compute_capability="9.0",
        precision="fp16",
        profiles=({"input": OptimizationProfileSpec((1, 3, 224, 224), (8, 3, 224, 224),
                                                     (32, 3, 224, 224))},),
        plugins=("SkipLayerNorm",), build_seconds=42.5, engine_bytes=1234567,
        timing_cache_warm=True, extra={"options": {"workspace_bytes": 1 << 30}})
    fields.update(changes)
    return EngineMetadata(**fields)  # type: ignore[arg-type]


def test_metadata_round_trips_through_json():
    original = metadata()

    restored = EngineMetadata.from_json(original.to_json())

    assert restored == original
    assert restored.profiles[0]["input"].max == (32, 3, 224, 224)


def test_metadata_json_records_every_fact_the_issue_lists():
    data = metadata().to_dict()

    for key in ("tensorrt_version", "gpu_name", "compute_capability", "precision", "profiles",
                "plugins", "build_seconds", "engine_bytes"):
        assert key in data
    assert data["backend"] == "tensorrt"
    assert data["profiles"] == [{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224],
                                           "max": [32, 3, 224, 224]}}]


@pytest.mark.parametrize("text", [
    "not json", "[1, 2]", '{"backend": "onnxruntime", "metadata_version": 1}',
    '{"backend": "tensorrt", "metadata_version": 99}', '{"backend": "tensorrt"}',
])
def test_malformed_metadata_is_an_internal_error(text):
    with pytest.raises(InternalError, match="metadata"):
        EngineMetadata.from_json(text)


def test_missing_field_is_an_internal_error():
    data = metadata().to_dict()
    del data["engine_bytes"]

    with pytest.raises(InternalError, match="engine_bytes"):
        EngineMetadata.from_dict(data)


def test_same_gpu_and_release_loads_without_warnings():
    assert check_compatible(metadata(), H200, "10.16.1.11") == ()


def test_build_number_does_not_matter():
    assert check_compatible(metadata(), H200, "10.16.1.5") == ()


def test_another_gpu_of_the_same_compute_capability_loads_with_a_warning():
    warnings = check_compatible(metadata(), H100, "10.16.1.11")

    assert len(warnings) == 1
    assert "NVIDIA H200" in warnings[0] and "NVIDIA H100" in warnings[0]


def test_other_compute_capability_is_refused_naming_both_gpus():
    with pytest.raises(EngineBuildError, match=r"compute capability 9\.0.*'NVIDIA H200'.*"
                                               r"'NVIDIA A100-SXM4-80GB'.*8\.0.*Rebuild"):
        check_compatible(metadata(), A100, "10.16.1.11")


@pytest.mark.parametrize("here", ["10.15.1.29", "11.4.0.106", "10.16.0.1"])
def test_other_tensorrt_release_is_refused_naming_both_versions(here):
    with pytest.raises(EngineBuildError, match=rf"TensorRT 10\.16\.1\.11.*TensorRT "
                                               rf"{here.replace('.', '[.]')}.*Rebuild"):
        check_compatible(metadata(), H200, here)


def test_release_of_reads_major_minor_patch():
    assert release_of("10.16.1.11") == (10, 16, 1)
    assert release_of("11.4.0") == (11, 4, 0)
    assert release_of("11.4.0.post1") == (11, 4, 0)
    with pytest.raises(InternalError):
        release_of("unknown")


def test_gpu_info_round_trips():
    assert GpuInfo.from_dict(H200.to_dict()) == H200


@dataclass(frozen=True)
class WorkerGpu:
    """Shaped like the worker's own GPU record: extra fields, optional compute capability."""

    index: int
    name: str
    compute_capability: str | None
    memory_total_mib: int | None = None


def test_any_gpu_record_with_name_and_compute_capability_is_accepted():
    assert check_compatible(metadata(), WorkerGpu(0, "NVIDIA H200", "9.0"), "10.16.1.11") == ()


def test_gpu_of_unknown_compute_capability_is_an_internal_error():
    with pytest.raises(InternalError, match="compute capability of GPU 'NVIDIA H200' is unknown"):
        check_compatible(metadata(), WorkerGpu(0, "NVIDIA H200", None), "10.16.1.11")
