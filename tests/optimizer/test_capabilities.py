"""Capability detection: this host reports no GPU cleanly; nvidia-smi's CSV is parsed (drivers with
and without `compute_cap`); compute capabilities and GPU names normalize; CUDA_VISIBLE_DEVICES
is honoured as CUDA does; the CPU side: OpenVINO and NNCF found, and the precision flags (bf16's)
read from the CPU's flags, which the tests stub rather than the runtime."""

import shutil
import stat
from pathlib import Path

import pytest

from optimizer.capabilities import (
    GpuInfo,
    HostCapabilities,
    detect_capabilities,
    gpu_name_slug,
    normalize_compute_capability,
    parse_nvidia_smi_csv,
    precision_cpu_flags,
    sm_tag,
    visible_gpus,
)
from optimizer.registries.precisions import PRECISIONS, Precision

# `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,uuid,driver_version
#  --format=csv,noheader,nounits` on a two-GPU host (one H200, one L4), driver 570.
NVIDIA_SMI_CSV = """\
0, NVIDIA H200, 9.0, 143771, GPU-6f3d2a1c-8e0b-4a6e-9c1d-2b7e5f4a3c21, 570.124.06
1, NVIDIA L4, 8.9, 23034, GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789, 570.124.06
"""

H200 = GpuInfo(0, "NVIDIA H200", "9.0", 143771, "GPU-6f3d2a1c-8e0b-4a6e-9c1d-2b7e5f4a3c21", "570.124.06")
L4 = GpuInfo(1, "NVIDIA L4", "8.9", 23034, "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789", "570.124.06")


def test_this_host_reports_no_gpu_and_no_tensorrt_without_raising() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has nvidia-smi; the no-GPU path is what this test checks")
    caps = detect_capabilities()
    assert caps.gpus == () and caps.gpu is None
    assert caps.tensorrt_version is None and not caps.can_build_tensorrt
    assert caps.describe().startswith("none (no NVIDIA GPU: ")
    assert "nvidia-smi not found" in caps.describe()
    assert caps.to_dict() == {"gpus": [], "tensorrt_version": None, "notes": list(caps.notes),
                              "openvino_version": caps.openvino_version,
                              "nncf_version": caps.nncf_version,
                              "cpu_flags": sorted(caps.cpu_flags)}


def test_this_host_finds_the_openvino_and_nncf_the_project_installs() -> None:
    caps = detect_capabilities()
    assert caps.openvino_version == "2026.4.1" and caps.nncf_version == "3.4.0"
    assert caps.can_run_openvino
    assert "OpenVINO 2026.4.1; NNCF 3.4.0" in caps.describe()


def test_a_host_without_nncf_cannot_run_openvino() -> None:
    assert not HostCapabilities(openvino_version="2026.4.1").can_run_openvino
    assert not HostCapabilities(nncf_version="3.4.0").can_run_openvino


def test_precision_cpu_flags_keeps_only_the_flags_a_precision_reads() -> None:
    zen4 = ["fpu", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "sha_ni"]
    sapphire_rapids = ["avx512f", "amx_tile", "amx_bf16", "amx_int8"]
    assert precision_cpu_flags(zen4) == {"avx512_bf16"}
    assert precision_cpu_flags(sapphire_rapids) == {"amx_bf16"}
    assert precision_cpu_flags(["avx2", "fma"]) == frozenset()


@pytest.mark.parametrize(("flags", "refused"), [
    (frozenset({"avx512_bf16"}), False), (frozenset({"amx_bf16"}), False),
    (frozenset(), True)])
def test_bf16_is_refused_on_a_cpu_without_bf16_kernels(flags: frozenset[str],
                                                       refused: bool) -> None:
    host = HostCapabilities(openvino_version="2026.4.1", nncf_version="3.4.0", cpu_flags=flags)
    refusal = PRECISIONS[Precision.BF16].cpu_refusal(host.cpu_flags)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert "amx_bf16 or avx512_bf16" in refusal and "Zen 4" in refusal
    assert PRECISIONS[Precision.FP32].cpu_refusal(host.cpu_flags) is None


def test_nvidia_smi_csv_is_parsed_into_gpus() -> None:
    assert parse_nvidia_smi_csv(NVIDIA_SMI_CSV) == (H200, L4)
    assert H200.sm == "sm90" and L4.sm == "sm89"


def test_not_available_values_become_none() -> None:
    [gpu] = parse_nvidia_smi_csv("0, NVIDIA A100-SXM4-80GB, [N/A], [N/A], [N/A], 535.54.03\n")
    assert gpu == GpuInfo(0, "NVIDIA A100-SXM4-80GB", None, None, None, "535.54.03")
    assert gpu.sm is None


def test_output_with_the_wrong_number_of_values_is_refused() -> None:
    with pytest.raises(ValueError, match="has 2 values; expected 6"):
        parse_nvidia_smi_csv("0, NVIDIA H200\n")


def _fake_nvidia_smi(tmp_path: Path, script: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_detection_reads_nvidia_smi_and_applies_cuda_visible_devices(tmp_path: Path) -> None:
    (tmp_path / "out.csv").write_text(NVIDIA_SMI_CSV)
    smi = _fake_nvidia_smi(tmp_path, f"cat {tmp_path / 'out.csv'}\n")
    assert detect_capabilities(nvidia_smi=smi, environ={}).gpus == (H200, L4)
    caps = detect_capabilities(nvidia_smi=smi, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert caps.gpus == (L4,) and caps.gpu == L4
    assert "NVIDIA L4 (compute capability 8.9, 23034 MiB)" in caps.describe()


def test_driver_without_compute_cap_is_asked_again_without_it(tmp_path: Path) -> None:
    smi = _fake_nvidia_smi(
        tmp_path,
        'case "$1" in *compute_cap*)\n'
        '  echo \'Field "compute_cap" is not a valid field to query.\'; exit 2;;\n'
        'esac\n'
        'echo "0, Tesla T4, 15360, GPU-1234, 470.82.01"\n',
    )
    [gpu] = detect_capabilities(nvidia_smi=smi, environ={}).gpus
    assert gpu == GpuInfo(0, "Tesla T4", None, 15360, "GPU-1234", "470.82.01")


def test_failing_nvidia_smi_becomes_a_note(tmp_path: Path) -> None:
    smi = _fake_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it could not '
                                     'communicate with the NVIDIA driver."; exit 9\n')
    caps = detect_capabilities(nvidia_smi=smi, environ={})
    assert caps.gpus == ()
    assert "exited with code 9: NVIDIA-SMI has failed" in caps.describe()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, (H200, L4)),
        ("1,0", (L4, H200)),
        ("GPU-0a1b", (L4,)),
        ("0,7,1", (H200,)),  # CUDA stops at the first entry that names no GPU
        ("-1", ()),
        ("", ()),
    ],
)
def test_visible_gpus_follow_cuda_rules(visible: str | None, expected: tuple[GpuInfo, ...]) -> None:
    assert visible_gpus((H200, L4), visible) == expected


def test_hidden_gpus_are_noted() -> None:
    caps = HostCapabilities(gpus=(), notes=("CUDA_VISIBLE_DEVICES='-1' hides all 2 GPU(s)",))
    assert "hides all 2 GPU(s)" in caps.describe()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9.0", "9.0"), ("sm90", "9.0"), ("sm_90", "9.0"), ("SM_120", "12.0"), (" 8.9 ", "8.9"),
     ("sm_8.6", "8.6"), ("H200", None), ("NVIDIA L4", None), ("90", None), ("9", None)],
)
def test_compute_capability_forms_normalize(text: str, expected: str | None) -> None:
    assert normalize_compute_capability(text) == expected


def test_sm_tag_and_name_slugs() -> None:
    assert sm_tag("9.0") == "sm90" and sm_tag("12.0") == "sm120" and sm_tag("sm_89") == "sm89"
    with pytest.raises(ValueError, match="not a compute capability"):
        sm_tag("H200")
    assert gpu_name_slug("NVIDIA H200") == gpu_name_slug("h200") == "h200"
    assert gpu_name_slug("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090"
    assert gpu_name_slug("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
