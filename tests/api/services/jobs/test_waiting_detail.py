"""A queued GPU job's status detail names what its backend needs, in its spec's words: a second
GPU backend's job waits for a worker of its own, not for a TensorRT one."""

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from api.services.jobs import commands
from core.job_config import Backend, JobConfig
from optimizer.capabilities import HostCapabilities
from tests.support.fake_gpu_backend import FAKE_GPU_ONLY, TENSORRT_ONLY, fake_gpu_registered
from tests.support.worker_heartbeats import beat


@pytest.fixture(autouse=True)
def fake_gpu_backend() -> Iterator[None]:
    with fake_gpu_registered():
        yield


def _fake_gpu_job(target_gpu: str | None = None) -> JobConfig:
    return JobConfig.model_validate({"backend": "fakegpu", "target_gpu": target_gpu})


def test_with_no_worker_online_it_names_the_backend_its_needs_and_its_queue(
        db_session: Session) -> None:
    detail = commands.waiting_detail(db_session, _fake_gpu_job())
    assert detail == (
        "waiting for a worker: no online worker can build FakeGPU engines (an NVIDIA GPU and the "
        "FakeGPU compiler) (queue 'fakegpu'); no GPU worker is online. The job stays queued until "
        "one starts (`fuseforge worker --queues fakegpu` on a GPU machine).")


def test_a_tensorrt_worker_online_does_not_take_it(db_session: Session) -> None:
    beat(db_session, "celery@trt", TENSORRT_ONLY, ["cpu", "gpu", "gpu.sm90", "gpu.h200"])
    detail = commands.waiting_detail(db_session, _fake_gpu_job("9.0"))
    assert detail is not None and detail.startswith(
        "waiting for a worker: no online worker has a GPU of compute capability 9.0 with FakeGPU "
        "(queue 'fakegpu.sm90'); online GPU workers: celery@trt (NVIDIA H200, compute capability "
        "9.0, TensorRT 10.16.1).")


def test_a_worker_of_its_own_online_leaves_no_detail(db_session: Session) -> None:
    beat(db_session, "celery@fake", FAKE_GPU_ONLY, ["fakegpu", "fakegpu.sm90", "fakegpu.h200"])
    for target in (None, "9.0", "H200"):
        assert commands.waiting_detail(db_session, _fake_gpu_job(target)) is None, target
    trt = commands.waiting_detail(db_session, JobConfig(backend=Backend.TENSORRT))
    assert trt is not None and "can build TensorRT engines (an NVIDIA GPU and TensorRT)" in trt
    assert "online GPU workers: celery@fake (NVIDIA H200, compute capability 9.0)." in trt


def test_an_openvino_job_waits_for_a_worker_with_openvino_saying_so(db_session: Session) -> None:
    beat(db_session, "celery@cpu", HostCapabilities(), ["cpu"])  # no OpenVINO: queue dropped
    detail = commands.waiting_detail(db_session, JobConfig(backend=Backend.OPENVINO))
    assert detail == (
        "waiting for a worker: no online worker can run OpenVINO jobs (the openvino and nncf "
        "Python packages (pip install 'fuseforge[openvino]'); queue 'openvino'). The job stays "
        "queued until one starts (`fuseforge worker --queues openvino` on a host that has them).")
    assert commands.waiting_detail(db_session, JobConfig(backend=Backend.ONNXRUNTIME)) is None
    beat(db_session, "celery@openvino", HostCapabilities(openvino_version="2026.4.1",
                                                         nncf_version="3.4.0"), ["cpu", "openvino"])
    assert commands.waiting_detail(db_session, JobConfig(backend=Backend.OPENVINO)) is None
