"""Models and jobs made through the REST API the way the dashboard's scripts make them: the
signed-in browser's session cookie and its page's CSRF token (static/upload.js, new_job.js)."""

from typing import Any

import onnx
from fastapi.testclient import TestClient
from onnx import TensorProto, helper

from core.api_keys import server_secret
from core.browser_sessions import CSRF_HEADER, csrf_token
from core.settings import Settings

__all__ = ["browser_headers", "start_job", "token_model", "upload_model"]


def browser_headers(settings: Settings, key: str) -> dict[str, str]:
    """The header a page's script sends with every write (FuseForge.csrf())."""
    return {CSRF_HEADER: csrf_token(server_secret(settings), key)}


def upload_model(site: TestClient, headers: dict[str, str], model: onnx.ModelProto | bytes,
                 filename: str = "model.onnx", name: str | None = None) -> dict[str, Any]:
    """POST /v1/models as upload.js does (multipart `file`, optional `name` field): the model."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    response = site.post("/v1/models", files={"file": (filename, data)}, headers=headers,
                         data={"name": name} if name else None)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def start_job(site: TestClient, headers: dict[str, str], model_id: str, **options: Any) -> dict[str, Any]:
    response = site.post("/v1/jobs", json={"model_id": model_id, **options}, headers=headers)
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def token_model(opset: int = 13) -> onnx.ModelProto:
    """Token ids int64 [batch, seq] plus a float mask [batch, <unnamed>] -> float32 [batch, seq];
    a static int64 `position` [1, 4] beside them."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", None])
    position = helper.make_tensor_value_info("position", TensorProto.INT64, [1, 4])
    out = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "seq"])
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["ids_f", "mask"], ["scores"]),
        helper.make_node("Identity", ["position"], ["position_out"]),
    ]
    position_out = helper.make_tensor_value_info("position_out", TensorProto.INT64, [1, 4])
    graph = helper.make_graph(nodes, "tokens", [ids, mask, position], [out, position_out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="dashboard-tests")
