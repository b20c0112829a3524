"""The OpenAPI document (GET /openapi.json) shows an example of every JSON request body and
every 2xx JSON response; every example in it validates against its schema (uuids are uuids,
times are times), a response example shows every field its schema has (so a field added later
without one fails here), and the examples of the API's models pass those models too (the rules
JSON Schema cannot say, such as JobConfig's between fields)."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

import api.routes
import api.schemas
from api.main import create_app

_METHODS = ("get", "put", "post", "delete", "patch")
_JSON = "application/json"

Schema = dict[str, Any]

_FORMATS = jsonschema.FormatChecker()  # "uuid" built in; "date-time" needs a package we lack


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or ("T" in value and bool(datetime.fromisoformat(value)))


@pytest.fixture(scope="module")
def document() -> Schema:
    response = TestClient(create_app()).get("/openapi.json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def _resolved(document: Schema, schema: Schema) -> Schema:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


def _json_bodies(document: Schema) -> Iterator[tuple[str, Schema, bool]]:
    """(label, media type object, is a response) of every JSON request body and 2xx answer."""
    for path, item in document["paths"].items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            label = f"{method.upper()} {path}"
            request = operation.get("requestBody", {}).get("content", {}).get(_JSON)
            if request is not None:
                yield f"{label} request body", request, False
            for code, response in operation["responses"].items():
                media = response.get("content", {}).get(_JSON)
                if code.startswith("2") and media is not None:
                    yield f"{label} {code}", media, True


def _examples(document: Schema, media: Schema) -> list[Any]:
    """The media type's own examples, else its schema's; an array's, else its items' (an
    array of one item)."""
    found = [media["example"]] if "example" in media else []
    found += [example["value"] for example in media.get("examples", {}).values()]
    schema = _resolved(document, media.get("schema", {}))
    found += schema.get("examples", [])
    if not found and schema.get("type") == "array":
        found += [[item] for item in _resolved(document, schema.get("items", {})).get("examples", [])]
    return found


def _validator(document: Schema, schema: Schema) -> jsonschema.Draft202012Validator:
    # The schema's $refs point into the document's components: carry them along.
    root = {**schema, "components": document["components"]}
    return jsonschema.Draft202012Validator(root, format_checker=_FORMATS)


def _schema_examples(node: object, at: str) -> Iterator[tuple[str, Schema]]:
    """(JSON pointer, schema) of every schema in `node` that lists `examples`."""
    if isinstance(node, dict):
        if isinstance(node.get("examples"), list):
            yield at, node
        for key, value in node.items():
            if key != "examples":
                yield from _schema_examples(value, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _schema_examples(value, f"{at}/{i}")


def _missing_fields(document: Schema, schema: Schema, value: object, at: str) -> list[str]:
    """The fields `schema` declares that `value` (an example) leaves out, at any depth."""
    schema = _resolved(document, schema)
    if value is None:
        return []
    if "anyOf" in schema:  # `X | None`: X; a real union of several shapes is not followed
        branches = [b for b in schema["anyOf"] if _resolved(document, b).get("type") != "null"]
        return _missing_fields(document, branches[0], value, at) if len(branches) == 1 else []
    if isinstance(value, list) and "items" in schema:
        return [field for i, item in enumerate(value)
                for field in _missing_fields(document, schema["items"], item, f"{at}[{i}]")]
    if isinstance(value, dict) and "properties" in schema:
        properties: Schema = schema["properties"]
        return [f"{at}.{name}" for name in properties if name not in value] + [
            field for name, sub in properties.items() if name in value
            for field in _missing_fields(document, sub, value[name], f"{at}.{name}")]
    return []


def _models_with_examples() -> list[type[BaseModel]]:
    """The API's pydantic models (api/schemas, and those defined in api/routes) that list
    examples."""
    models = []
    for package in (api.schemas, api.routes):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, BaseModel)
                        and value.__module__ == module.__name__
                        and isinstance(value.model_config.get("json_schema_extra"), dict)
                        and "examples" in value.model_config["json_schema_extra"]):
                    models.append(value)
    return models


def test_every_json_request_body_and_2xx_response_has_an_example(document: Schema) -> None:
    bodies = list(_json_bodies(document))
    assert len(bodies) >= 14, [label for label, _, _ in bodies]  # the walk finds the routes

    assert [label for label, media, _ in bodies if not _examples(document, media)] == []


def test_every_body_example_validates_against_its_schema(document: Schema) -> None:
    problems = []
    for label, media, _ in _json_bodies(document):
        validator = _validator(document, media.get("schema", {}))
        for example in _examples(document, media):
            problems += [f"{label}: {error.json_path}: {error.message}"
                         for error in validator.iter_errors(example)]
    assert problems == []


def test_every_schema_example_in_the_document_validates_against_its_schema(
        document: Schema) -> None:
    found = list(_schema_examples(document["components"]["schemas"], "#/components/schemas"))
    assert len(found) >= 10

    problems = [f"{at}: {error.json_path}: {error.message}"
                for at, schema in found
                for example in schema["examples"]
                for error in _validator(document, schema).iter_errors(example)]
    assert problems == []


def test_every_response_example_shows_every_field(document: Schema) -> None:
    missing = [f"{label}: {field}"
               for label, media, is_response in _json_bodies(document) if is_response
               for example in _examples(document, media)
               for field in _missing_fields(document, media.get("schema", {}), example, "$")]
    assert missing == []


def test_a_null_in_an_example_survives_into_the_document(document: Schema) -> None:
    # FastAPI drops nulls from the document; api/http/openapi_examples.py puts them back. Here a
    # null means "clear the default webhook", and leaving the field out "keep it".
    examples = document["components"]["schemas"]["ProjectUpdate"]["examples"]
    assert {"default_callback_url": None} in examples


@pytest.mark.parametrize("model", _models_with_examples(), ids=lambda model: model.__name__)
def test_each_models_examples_pass_the_model_itself(model: type[BaseModel]) -> None:
    examples = model.model_config["json_schema_extra"]["examples"]  # type: ignore[index]
    assert examples
    for example in examples:
        # As JSON, the way a request arrives: "2026-12-01T22:30:00Z" must parse as a time.
        model.model_validate_json(json.dumps(example))
