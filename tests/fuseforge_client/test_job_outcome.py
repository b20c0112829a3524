"""`Job.outcome` is the server's outcome, typed: what shipped, the speed-up verdict with its
interval, the accuracy verdict and the headline; a cancelled job's says nothing shipped. Against
a real API server; the job is finished as a worker's last step would
(tests/support/finished_jobs.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from fuseforge_client import FuseForgeClient, JobOutcome
from optimizer.testing.models import small_cnn
from tests.support.api_server import ApiServer, running_api
from tests.support.broker import TEST_REDIS_URL
from tests.support.finished_jobs import finish_with_engine_timing


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with running_api(tmp_path, broker_url=TEST_REDIS_URL) as server:
        yield server


def test_job_outcome_is_typed_and_its_headline_the_servers(api: ApiServer,
                                                            tmp_path: Path) -> None:
    model_path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=8), model_path)
    engine = create_engine(f"sqlite:///{api.data_dir / 'fuseforge.sqlite'}")
    try:
        with FuseForgeClient(api.base_url) as client:
            model = client.upload_model(model_path)
            submitted = client.submit_job(model.id, {}, precision="int8")
            cancelled = client.submit_job(model.id)
            assert submitted.outcome is None  # queued: no outcome yet
            finish_with_engine_timing(sessionmaker(engine), uuid.UUID(submitted.id), 2.5,
                                      (2.4, 2.6))
            client.cancel(cancelled.id)
            done = client.wait(submitted.id, timeout_s=30)
            gone = client.get_job(cancelled.id)
            server = client.get_job(submitted.id).data["outcome"]
    finally:
        engine.dispose()

    assert isinstance(done.outcome, JobOutcome)
    assert done.outcome.headline == server["headline"]
    assert done.outcome.asked["precision"] == "int8"
    assert done.outcome.shipped is not None and done.outcome.shipped.what == "engine"
    assert done.outcome.shipped.label == "onnxruntime int8 engine"
    assert done.outcome.speedup is not None and done.outcome.speedup.value == pytest.approx(2.0)
    assert done.outcome.accuracy_verdict == "not judged"
    assert gone.outcome is not None and gone.outcome.shipped is None
    assert gone.outcome.headline == "Cancelled: nothing shipped (onnxruntime fp32 asked)."
