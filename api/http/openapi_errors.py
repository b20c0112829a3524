"""The OpenAPI document says what errors look like: every error the API answers is
`{"error": <name>, "detail": <message>}` (api/main.py), so each operation documents that body
for its 422 (FastAPI's default there describes its own validation body, which this API never
sends) and as its `default` response (404, 409, 413, 503, ...)."""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["ERROR_SCHEMA", "document_errors"]

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "the error's name, e.g. JobNotFound",
                  "examples": ["JobNotFound"]},
        "detail": {"type": "string", "description": "what went wrong and what to do",
                   "examples": ["No job with id 5f0c...: it never existed or was deleted."]},
    },
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_METHODS = ("get", "put", "post", "delete", "patch")


def document_errors(app: FastAPI) -> None:
    """Make `app.openapi()` document the API's error body on every operation."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 description=app.description, routes=app.routes)
            _add_error_responses(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_error_responses(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, never sent here
        components.pop(name, None)
    for path in schema.get("paths", {}).values():
        for method in _METHODS:
            operation = path.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                responses["422"] = _error_response(
                    "the request does not fit the schema (the detail names each field)")
            responses.setdefault("default", _error_response(
                "an error: the status code says which kind (404 unknown id, 409 conflict, "
                "413 too large, 503 unavailable with Retry-After, ...)"))


def _error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}
