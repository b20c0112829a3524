"""Uploaded models are checked outside the API process: garbage is refused from its framing
alone, and the full check runs in a process of its own under a memory and a time limit, whose
breach is a 422 naming the setting; nothing is stored either way."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.deps import get_model_checker
from api.services.uploads.model_checks import ModelCheckAborted, ModelChecker
from core.db.models import Model
from core.settings import ModelCheckSettings, Settings
from optimizer.errors import InvalidModelError
from optimizer.model.limits import ModelLimits
from optimizer.testing.models import large_model, model_bytes, small_cnn


def _nothing_stored(db_session: Session, settings: Settings) -> bool:
    stored = [p for p in settings.data_dir.rglob("*") if p.is_file()]
    return db_session.scalar(select(func.count()).select_from(Model)) == 0 and stored == []


@pytest.fixture
def strict_client(client: TestClient) -> Iterator[TestClient]:
    """The API with a model check allowed 0.1 GiB and 0.2 s."""
    checker = ModelChecker(ModelCheckSettings(max_rss_gib=0.1, timeout_s=30))
    client.app.dependency_overrides[get_model_checker] = lambda: checker  # type: ignore[attr-defined]
    yield client


def _heavy_skeleton(megabytes: int) -> bytes:
    """A model whose skeleton itself is large: a string tensor's bytes are never stripped
    (only numbers are), so the check parses all of them."""
    text = helper.make_tensor("text", TensorProto.STRING, [1], [b"x" * (megabytes * 2**20)])
    graph = helper.make_graph([helper.make_node("Identity", ["text"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [1])],
                              [text])
    return model_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_check_over_its_memory_limit_is_422_naming_the_setting(
        strict_client: TestClient, db_session: Session, settings: Settings) -> None:
    response = strict_client.post("/v1/models",
                                  files={"file": ("large.onnx", _heavy_skeleton(48))})

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "needs more than its 0.1 GiB of memory" in detail
    assert "FUSEFORGE_MODEL_CHECK__MAX_RSS_GIB" in detail
    assert _nothing_stored(db_session, settings)


def test_the_checks_memory_is_the_graphs_not_the_weights(client: TestClient) -> None:
    # 300 MB of weights in 0.5 GiB, of which the check's process starts holding 0.25 (Python,
    # onnx, numpy): reading and parsing the whole file would take twice the rest; the skeleton
    # the check parses holds none of them.
    checker = ModelChecker(ModelCheckSettings(max_rss_gib=0.5, timeout_s=60))
    client.app.dependency_overrides[get_model_checker] = lambda: checker  # type: ignore[attr-defined]
    response = client.post("/v1/models",
                           files={"file": ("large.onnx", model_bytes(large_model(300)))})

    assert response.status_code == 201, response.text


def test_a_check_over_its_time_limit_is_stopped(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_bytes(small_cnn()))
    checker = ModelChecker(ModelCheckSettings(timeout_s=0.001))
    with pytest.raises(ModelCheckAborted, match="did not finish within 0.001 s"):
        checker.check(path, ModelLimits(), name="cnn.onnx")


def test_the_check_runs_in_another_process_and_answers_like_check_model_file(
        tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_bytes(small_cnn()))
    summary = ModelChecker(ModelCheckSettings()).check(path, ModelLimits(), name="cnn.onnx")
    assert [spec.name for spec in summary.inputs] == ["input"]
    hollow = tmp_path / "hollow.onnx"
    hollow.write_bytes(b"\x08\x07")  # ir_version 7 and nothing else: framed, not a model
    with pytest.raises(InvalidModelError, match="it has no opset_import, no graph"):
        ModelChecker(ModelCheckSettings()).check(hollow, ModelLimits(), name="hollow.onnx")


def test_an_upload_is_kept_fresh_for_the_janitor_while_it_waits_and_is_checked(
        tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_bytes(small_cnn()))
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    checker = ModelChecker(ModelCheckSettings(at_once=1))
    other = threading.Thread(target=checker.check, args=(path, ModelLimits()),
                             kwargs={"name": "other.onnx"})
    with checker._turns:  # another upload's check holds the only turn for 1.5 s
        other.start()
        time.sleep(1.5)
        # The janitor's view: the waiting upload was touched within the last second or two.
        assert path.stat().st_mtime > time.time() - 2.5
    other.join(timeout=60)
    assert path.stat().st_mtime > an_hour_ago + 3000


def test_a_large_file_of_random_bytes_is_refused_from_its_framing_at_once(
        client: TestClient, db_session: Session, settings: Settings, tmp_path: Path) -> None:
    junk = os.urandom(64 * 2**20)
    response = client.post("/v1/models", content=junk,
                           headers={"Content-Type": "application/octet-stream"},
                           params={"name": "junk.onnx"})
    assert response.status_code == 422, response.text
    assert "'junk.onnx' is not an ONNX protobuf: at byte" in response.json()["detail"]
    assert _nothing_stored(db_session, settings)
