"""The OpenAPI document keeps its examples' nulls. FastAPI encodes the document leaving out
every None, examples included, so `{"default_callback_url": null}` (clear it) would read `{}`
(leave it), and a job example would lose its `"error": null`. Each model's examples are put
back into its component as the model declares them (api/schemas/examples.py)."""

import typing
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_fields_from_routes
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

__all__ = ["keep_example_nulls"]


def keep_example_nulls(app: FastAPI) -> None:
    """Make `app.openapi()` show the examples of the models its routes take and answer with
    their nulls."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        components = schema.get("components", {}).get("schemas", {})
        for model in _route_models(app):
            examples = _declared_examples(model)
            component = components.get(model.__name__)
            if examples is not None and component is not None:
                component["examples"] = to_jsonable_python(examples)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _declared_examples(model: type[BaseModel]) -> list[Any] | None:
    extra = model.model_config.get("json_schema_extra")
    return extra.get("examples") if isinstance(extra, dict) else None  # type: ignore[return-value]


def _route_models(app: FastAPI) -> set[type[BaseModel]]:
    """Every model the routes' bodies, answers and parameters are made of (the fields FastAPI
    builds the document from), nested ones included."""
    seen: set[type[BaseModel]] = set()
    for field in get_fields_from_routes(app.routes):
        for model in _models_in(field.field_info.annotation):
            _collect(model, seen)
    return seen


def _collect(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        for nested in _models_in(field.annotation):
            _collect(nested, seen)


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    """The models in a type: `JobRead`, `list[WorkerRead]`, `Annotated[X | None, ...]`..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _models_in(argument)
