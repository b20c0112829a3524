"""Uploading models: stored once per content, bad files refused with nothing left behind."""

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Model
from core.settings import ModelLimitSettings, Settings
from optimizer.testing.models import mlp, model_bytes, small_cnn
from tests.support import hostile_models


def _model_with_unknown_op() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _stored_files(settings: Settings) -> list[Path]:
    return [p for p in settings.data_dir.rglob("*") if p.is_file()]


def _assert_nothing_stored(db_session: Session, settings: Settings) -> None:
    assert db_session.scalar(select(func.count()).select_from(Model)) == 0
    assert _stored_files(settings) == []


def test_upload_returns_201_with_model_description(client: TestClient) -> None:
    data = model_bytes(small_cnn())
    response = client.post("/v1/models", files={"file": ("cnn.onnx", data)})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "cnn.onnx"
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["size_bytes"] == len(data)
    assert body["opset"] == 17
    assert body["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["N", 3, 32, 32]}]
    assert body["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["N", 10]}]
    assert body["job_count"] is None  # an upload's answer does not count jobs
    assert client.get(f"/v1/models/{body['id']}").json() == {**body, "job_count": 0}


def test_same_bytes_again_returns_200_with_existing_model(client: TestClient, settings: Settings) -> None:
    data = model_bytes(small_cnn())
    first = client.post("/v1/models", files={"file": ("a.onnx", data)})
    again = client.post("/v1/models", files={"file": ("b.onnx", data)})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert len(_stored_files(settings)) == 1


def test_raw_octet_stream_upload_takes_name_from_query(client: TestClient) -> None:
    response = client.post(
        "/v1/models?name=pipeline-model",
        content=model_bytes(small_cnn()),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "pipeline-model"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", "empty"),
        (model_bytes(small_cnn())[:200], "not an ONNX protobuf"),
        (np.random.default_rng(1).bytes(4096), "not"),
        (_model_with_unknown_op().SerializeToString(), "NoSuchOp"),
    ],
    ids=["empty", "truncated-protobuf", "random-bytes", "checker-failure"],
)
def test_invalid_file_is_422_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, payload: bytes, expected: str
) -> None:
    response = client.post("/v1/models", files={"file": ("bad.onnx", payload)})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidModelFile"
    assert expected in body["detail"]
    _assert_nothing_stored(db_session, settings)


@pytest.mark.parametrize(("payload", "expected"),
                         [pytest.param(data, expected, id=name)
                          for name, data, expected in hostile_models.HOSTILE_UPLOADS])
def test_hostile_model_is_422_naming_the_reason_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, payload: bytes, expected: str
) -> None:
    response = client.post("/v1/models", files={"file": ("hostile.onnx", payload)})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidModelFile"
    assert expected in body["detail"]
    assert len(body["detail"]) < 1000  # a 100k-character name is not echoed back
    _assert_nothing_stored(db_session, settings)


@pytest.mark.parametrize(
    ("field", "expected"),
    [("input", "input 'input' has element type 9999"),
     ("output", "output 'output' has element type 9999"),
     ("initializer", "tensor 'fc1.w' has element type 9999")],
)
def test_unknown_element_type_is_422_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, field: str, expected: str
) -> None:
    model = mlp()
    if field == "initializer":
        model.graph.initializer[0].data_type = 9999
    else:
        getattr(model.graph, field)[0].type.tensor_type.elem_type = 9999
    response = client.post("/v1/models", files={"file": ("m.onnx", model.SerializeToString())})
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_a_producer_longer_than_its_column_is_stored_cut_short(client: TestClient) -> None:
    model = small_cnn()
    model.producer_name = "p" * 300
    response = client.post("/v1/models", files={"file": ("m.onnx", model.SerializeToString())})
    assert response.status_code == 201, response.text
    assert response.json()["producer"] == "p" * 254 + "…"


def test_model_limits_come_from_settings_and_the_message_names_the_variable(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    settings.model_limits = ModelLimitSettings(max_rank=3)
    response = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 422, response.text
    assert "rank 4; the limit is 3" in response.json()["detail"]
    assert "FUSEFORGE_MODEL_LIMITS__MAX_RANK" in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_external_data_path_traversal_is_422_and_never_read(
    client: TestClient, db_session: Session, settings: Settings, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(16, np.float32).tobytes())
    weights = numpy_helper.from_array(np.zeros(16, np.float32), "w")
    weights.data_location = TensorProto.EXTERNAL
    weights.ClearField("raw_data")
    for key, value in (("location", "../../../../secret.bin"), ("length", "64")):
        weights.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    response = client.post("/v1/models", files={"file": ("ext.onnx", model.SerializeToString())})
    assert response.status_code == 422, response.text
    assert "outside" in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_external_data_with_a_negative_offset_is_422_not_500(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    weights = numpy_helper.from_array(np.zeros(16, np.float32), "w")
    weights.data_location = TensorProto.EXTERNAL
    weights.ClearField("raw_data")
    for key, value in (("location", "weights.bin"), ("offset", "-1"), ("length", "64")):
        weights.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    response = client.post("/v1/models", files={"file": ("ext.onnx", model.SerializeToString())})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidModelFile"
    assert "'weights.bin'" in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_over_limit_upload_is_413_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    settings.max_upload_bytes = 1000
    response = client.post("/v1/models", files={"file": ("big.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 413, response.text
    assert "FUSEFORGE_MAX_UPLOAD_BYTES" in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_form_without_file_field_is_422(client: TestClient) -> None:
    response = client.post("/v1/models", files={"model": ("m.onnx", b"abc")})
    assert response.status_code == 422
    assert "'model'" in response.json()["detail"]


def test_unsupported_content_type_is_415(client: TestClient) -> None:
    response = client.post("/v1/models", content=b"{}", headers={"Content-Type": "application/json"})
    assert response.status_code == 415
    assert "multipart/form-data" in response.json()["detail"]


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.get("/v1/models/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert response.json()["error"] == "ModelNotFound"


def test_models_are_listed_newest_first_with_paging(client: TestClient) -> None:
    ids = [
        client.post("/v1/models", files={"file": ("m.onnx", model_bytes(small_cnn(seed=s)))}).json()["id"]
        for s in range(3)
    ]
    page = client.get("/v1/models?limit=2&offset=0").json()
    rest = client.get("/v1/models?limit=2&offset=2").json()
    assert page["total"] == 3 and rest["total"] == 3
    assert [m["id"] for m in page["items"] + rest["items"]] == ids[::-1]
    assert client.get("/v1/models?limit=0").status_code == 422


def test_chunked_upload_over_limit_is_cut_off_while_streaming(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    settings.max_upload_bytes = 64 * 1024
    def body():  # no Content-Length: the limit must hold while bytes arrive
        for _ in range(64):
            yield b"\0" * 16 * 1024

    response = client.post(
        "/v1/models", content=body(), headers={"Content-Type": "application/octet-stream"}
    )
    assert response.status_code == 413, response.text
    _assert_nothing_stored(db_session, settings)


def test_model_list_and_read_count_each_models_jobs(client: TestClient) -> None:
    busy, idle = (client.post("/v1/models", files={"file": ("m.onnx", model_bytes(small_cnn(seed=s)))})
                  .json()["id"] for s in (11, 12))
    for _ in range(2):
        assert client.post("/v1/jobs", json={"model_id": busy}).status_code == 202
    counts = {m["id"]: m["job_count"] for m in client.get("/v1/models").json()["items"]}
    assert counts == {busy: 2, idle: 0}
    assert client.get(f"/v1/models/{busy}").json()["job_count"] == 2
