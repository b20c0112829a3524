"""The client against a real FuseForge (API server, worker, PostgreSQL, Redis as separate
processes): a model goes up, a job runs, the artifacts come down; errors map to the tree."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from fuseforge_client import (
    ConflictError,
    FuseForgeClient,
    InvalidRequestError,
    Job,
    JobTimeoutError,
    NotFoundError,
    ValidationFailedError,
)
from optimizer.testing.models import small_cnn
from tests.e2e.stacks import running_stack
from tests.support.broker import TEST_REDIS_URL

pytestmark = pytest.mark.e2e

FAST = {"input_shapes": {"input": [2, 3, 32, 32]},
        "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_stack(tmp_path_factory.mktemp("client"), name="client",
                       redis_url=TEST_REDIS_URL, queues="cpu") as stack:
        yield stack.base_url


@pytest.fixture
def client(base_url: str) -> Iterator[FuseForgeClient]:
    with FuseForgeClient(base_url, api_key="") as client:
        yield client


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=uuid.uuid4().int % 1000), path)  # new bytes: a new model each time
    return path


def test_model_is_uploaded_optimized_and_its_artifacts_downloaded(
    client: FuseForgeClient, cnn: Path, tmp_path: Path,
) -> None:
    progress: list[tuple[int, int]] = []
    model = client.upload_model(cnn, on_progress=lambda sent, total: progress.append((sent, total)))
    assert model.size_bytes == cnn.stat().st_size
    assert progress[-1] == (cnn.stat().st_size, cnn.stat().st_size)

    seen: list[Job] = []
    job = client.submit_job(model.id, FAST, precision="fp16")
    # queued, or already claimed where the worker was quicker than the answer
    assert job.status in ("queued", "running") and job.data["config"]["precision"] == "fp16"
    done = client.wait(job.id, timeout_s=180, on_progress=seen.append)

    assert done.status == "succeeded" and done.validation_passed is True
    assert done.speedup is not None and done.speedup > 0
    assert seen[0].status in ("queued", "running") and seen[-1].status == "succeeded"
    assert len({(j.status, j.stage, j.progress) for j in seen}) == len(seen)  # only changes
    paths = client.download_artifacts(done, tmp_path / "out")
    assert {p.name for p in paths} == {a.name for a in done.artifacts} >= {"engine.onnx"}
    for artifact in done.artifacts:
        data = (tmp_path / "out" / artifact.name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == artifact.sha256
    onnx.checker.check_model(str(tmp_path / "out" / "engine.onnx"))
    assert not list((tmp_path / "out").glob(".*.part"))


def test_impossible_tolerance_raises_validation_failed_with_the_job(
    client: FuseForgeClient, cnn: Path,
) -> None:
    model = client.upload_model(cnn)
    job = client.submit_job(model.id, FAST, validation={"atol": 1e-12, "rtol": 0, "samples": 2})
    with pytest.raises(ValidationFailedError) as caught:
        client.wait(job.id, timeout_s=180)
    assert caught.value.job.status == "failed" and caught.value.job.validation_passed is False
    assert caught.value.error == "AccuracyMismatchError" and "atol=1e-12" in caught.value.detail


def test_unknown_job_is_not_found_with_the_servers_detail(client: FuseForgeClient) -> None:
    missing = str(uuid.uuid4())
    with pytest.raises(NotFoundError) as caught:
        client.get_job(missing)
    assert caught.value.status_code == 404 and caught.value.error == "JobNotFound"
    assert missing in caught.value.detail


def test_invalid_job_config_is_an_invalid_request_naming_the_field(
    client: FuseForgeClient, cnn: Path,
) -> None:
    model = client.upload_model(cnn)
    with pytest.raises(InvalidRequestError) as caught:
        client.submit_job(model.id, {"precision": "fp4", "benchmrk": {}})
    assert caught.value.status_code == 422
    assert "precision" in caught.value.detail and "benchmrk" in caught.value.detail


def test_wait_past_its_timeout_names_the_job_and_cancel_stops_it(
    client: FuseForgeClient, cnn: Path,
) -> None:
    model = client.upload_model(cnn)
    slow = {**FAST, "benchmark": {"warmup": 0, "iterations": 5000, "measure_memory": False}}
    job = client.submit_job(model.id, slow)
    with pytest.raises(JobTimeoutError) as caught:
        client.wait(job.id, timeout_s=1.0)
    assert job.id in str(caught.value) and caught.value.job.status in ("queued", "running")

    cancelled = client.cancel(job.id)
    assert cancelled.status == "cancelled"
    with pytest.raises(ConflictError):
        client.cancel(job.id)


def test_wait_polls_every_quarter_second_backing_off_to_two_while_nothing_changes(
    base_url: str, cnn: Path,
) -> None:
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the schedule at a twentieth of its pace
        slept.append(seconds)
        time.sleep(seconds / 20)

    with FuseForgeClient(base_url, api_key="", sleep=sleep) as client:
        model = client.upload_model(cnn)
        job = client.submit_job(model.id, {"backend": "tensorrt"})  # no GPU worker: it waits
        with pytest.raises(JobTimeoutError):
            client.wait(job.id, timeout_s=3.0)  # the last sleep is cut to what is left of it
        client.cancel(job.id)

    assert slept[:5] == [0.25, 0.5, 1.0, 2.0, 2.0], slept  # the README's schedule
    assert max(slept) == 2.0


def test_job_fields_are_read_from_the_servers_schema(client: FuseForgeClient) -> None:
    fields = client.job_fields()
    assert fields is not None and {"model_id", "backend", "precision", "validation"} <= fields


def test_delete_refuses_a_running_job_and_its_model_then_removes_them(
    client: FuseForgeClient, cnn: Path,
) -> None:
    model = client.upload_model(cnn)
    slow = {**FAST, "benchmark": {"warmup": 0, "iterations": 5000, "measure_memory": False}}
    job = client.submit_job(model.id, slow)

    with pytest.raises(ConflictError) as job_refused:
        client.delete_job(job.id)
    with pytest.raises(ConflictError) as model_refused:
        client.delete_model(model.id)
    assert "cancel it first" in job_refused.value.detail
    assert job.id in model_refused.value.detail

    client.cancel(job.id)
    client.delete_job(job.id)
    client.delete_model(model.id)
    with pytest.raises(NotFoundError):
        client.get_job(job.id)
    with pytest.raises(NotFoundError) as gone:
        client.delete_model(model.id)
    assert gone.value.error == "ModelNotFound"


def test_a_dataset_is_deleted_once(client: FuseForgeClient, tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, input=np.zeros((2, 1, 3, 32, 32), np.float32))
    dataset = client.upload_dataset(path)

    client.delete_dataset(dataset.id)

    with pytest.raises(NotFoundError) as gone:
        client.delete_dataset(dataset.id)
    assert gone.value.error == "DatasetNotFound"
