"""OpenVinoBackend refuses a job its host cannot run, saying why: no OpenVINO, or bf16 on a CPU
without bf16 kernels (the CPU flags stubbed, as a host without them reports them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.queues import cpu_queues, worker_queues
from optimizer.capabilities import HostCapabilities
from optimizer.errors import EngineBuildError
from optimizer.testing.models import small_cnn
from tests.support.embedded_worker import job_run
from worker.pipeline.backends.openvino import OpenVinoBackend

ZEN3 = HostCapabilities(openvino_version="2026.4.1", nncf_version="3.4.0", cpu_flags=frozenset())
ZEN4 = HostCapabilities(openvino_version="2026.4.1", nncf_version="3.4.0",
                        cpu_flags=frozenset({"avx512_bf16"}))


def test_bf16_is_refused_on_a_cpu_without_bf16_kernels(tmp_path: Path) -> None:
    run = job_run(tmp_path, small_cnn(), {"backend": "openvino", "precision": "bf16"})

    with pytest.raises(EngineBuildError) as caught:
        OpenVinoBackend(run, capabilities=ZEN3)

    assert str(caught.value).startswith("precision: bf16 needs a CPU with amx_bf16 or "
                                        "avx512_bf16"), caught.value
    assert "this worker's CPU has none of them" in str(caught.value)


def test_fp32_runs_on_a_cpu_without_bf16_and_bf16_on_one_with_it(tmp_path: Path) -> None:
    OpenVinoBackend(job_run(tmp_path, small_cnn(), {"backend": "openvino"}), capabilities=ZEN3)
    (tmp_path / "bf16").mkdir()
    bf16 = job_run(tmp_path / "bf16", small_cnn(), {"backend": "openvino", "precision": "bf16"})
    OpenVinoBackend(bf16, capabilities=ZEN4)


def test_a_host_without_openvino_refuses_saying_what_it_needs(tmp_path: Path) -> None:
    run = job_run(tmp_path, small_cnn(), {"backend": "openvino"})

    with pytest.raises(EngineBuildError, match=r"pip install 'fuseforge\[openvino\]'"):
        OpenVinoBackend(run, capabilities=HostCapabilities())


def test_a_host_without_openvino_drops_its_queue_and_keeps_onnx_runtimes() -> None:
    assert cpu_queues() == ["cpu", "openvino"]
    assert worker_queues(cpu_queues(), HostCapabilities()) == ([], ["openvino"])
    assert worker_queues(cpu_queues(), ZEN4) == ([], [])
