"""How the upload routes' request body is documented: the routes read it as a stream
(api/services/uploads/form.py), so FastAPI cannot infer it from their parameters."""

from typing import Any

__all__ = ["UPLOAD_BODY"]

_FILE = {"type": "string", "format": "binary"}

# openapi_extra for POST /v1/models and /v1/datasets.
UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the file, as a multipart form's `file` field (curl -F file=@model.onnx) "
                       "or as the whole body",
        "content": {
            "multipart/form-data": {
                "schema": {"type": "object", "required": ["file"],
                           "properties": {"file": _FILE}},
            },
            "application/octet-stream": {"schema": _FILE},
        },
    },
}
