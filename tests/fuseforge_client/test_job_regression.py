"""`Job.regression` reads what the server flagged: None for a job whose engine is not slower
than the model's earlier ones, the figures for one that is. Against a real API server; each
job is finished as a worker's last step would (tests/support/finished_jobs.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from fuseforge_client import FuseForgeClient
from optimizer.testing.models import small_cnn
from tests.support.api_server import ApiServer, running_api
from tests.support.broker import TEST_REDIS_URL
from tests.support.finished_jobs import finish_with_engine_timing


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with running_api(tmp_path, broker_url=TEST_REDIS_URL) as server:
        yield server


def test_job_regression_is_none_then_the_servers_figures(api: ApiServer, tmp_path: Path) -> None:
    model_path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=7), model_path)
    engine = create_engine(f"sqlite:///{api.data_dir / 'fuseforge.sqlite'}")
    sessions = sessionmaker(engine)
    try:
        with FuseForgeClient(api.base_url) as client:
            model = client.upload_model(model_path)
            first, second = (client.submit_job(model.id) for _ in range(2))
            finish_with_engine_timing(sessions, uuid.UUID(first.id), 2.4, (2.35, 2.46))
            finish_with_engine_timing(sessions, uuid.UUID(second.id), 3.1, (2.98, 3.22))
            earlier, later = (client.wait(job.id, timeout_s=30) for job in (first, second))
    finally:
        engine.dispose()

    assert earlier.regression is None
    assert later.regression is not None
    assert later.regression["against_job"] == first.id
    assert later.regression["slowdown"] == pytest.approx(3.1 / 2.4)
    assert later.regression["detail"].endswith(
        f"in job {first.id}, each against the original timed in its own run: 1.29× slower")
