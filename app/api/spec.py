"""The OpenAPI document as generated clients need it, from the one FastAPI builds.

FastAPI's document says things this server does not do, in ways generators take literally:

- a 422 on every operation with parameters, while the server answers bad input with a 400
  (its ``{"reason": ...}`` body): the 422s go, and a 400 is documented where one was not;
- integer bounds as floats (its OpenAPI models hold them as floats), so that int64's bound
  becomes ``9.223372036854776e+18``, above int64: bounds of integers are written back as
  integers;
- an optional body as ``anyOf: [schema, null]``: generated clients then send ``null`` or
  fail to serialize the "unset" marker; an optional body is one left out, so its schema is
  the non-null one.

And it does not know of what the middlewares do before the app runs: the bearer token that
authentication asks for is declared on each protected operation, and the request limits' 413
and 415 are documented on each operation that takes a body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI

from app.api.authentication import PROTECTED_PREFIXES

SCHEME = "bearerAuth"
_BODY_ERRORS = {
    "413": "PayloadTooLarge: the body is over the limit",
    "415": "UnsupportedMediaType: the body is not JSON",
}
_UNUSED_SCHEMAS = ("HTTPValidationError", "ValidationError")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Integers a double holds exactly; past them a float bound could stand for several.
_EXACT = 2**53


def tidy(schema: dict[str, Any]) -> dict[str, Any]:
    """Fix ``schema`` (an OpenAPI document built by FastAPI) in place, and return it."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            _tidy_operation(operation)
    components = schema.get("components", {})
    schemas = components.get("schemas", {})
    for name in _UNUSED_SCHEMAS:
        schemas.pop(name, None)
    for node in _nodes(schema):
        if node.get("type") == "integer":
            for key in _BOUNDS:
                if isinstance(node.get(key), float):
                    node[key] = integer_bound(node[key])
    return schema


def _tidy_operation(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    if responses.pop("422", None) is not None and "400" not in responses:
        responses["400"] = _error("BadRequest")
    body = operation.get("requestBody")
    if body is not None:
        for status, description in _BODY_ERRORS.items():
            responses.setdefault(status, _error(description))
        if not body.get("required", False):
            for media in body.get("content", {}).values():
                media["schema"] = _not_null(media.get("schema", {}))
    operation["responses"] = dict(sorted(responses.items()))


def _error(description: str) -> dict[str, Any]:
    # A new object each time: the YAML of a shared one would be anchors and aliases.
    schema = {"$ref": "#/components/schemas/ErrorBody"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {type: null}]`` as X, with the outer title and description."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) != 1:
        return schema
    outer = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**kept[0], **outer}


def integer_bound(value: float) -> int:
    """An integer's bound that FastAPI turned into a float, as the integer it was."""
    if value >= INT64_MAX:  # 2**63 - 1 has no double: it was rounded up to 2**63
        return INT64_MAX
    if value <= INT64_MIN:
        return INT64_MIN
    if not value.is_integer() or abs(value) > _EXACT:
        raise ValueError(f"integer bound {value!r} is not exact as a float: make it int64's")
    return int(value)


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in a JSON document."""
    if isinstance(value, dict):
        yield value
        for child in value.values():
            yield from _nodes(child)
    elif isinstance(value, list):
        for child in value:
            yield from _nodes(child)


def document_security(
    app: FastAPI, schemas: dict[str, Any] | None = None
) -> Callable[[], dict[str, Any]]:
    """The app's OpenAPI builder, with bearer auth declared on every protected operation,
    ``schemas`` (those of bodies that routes validate themselves) among the components, and
    tidied for generated clients (`tidy`)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {})
            components["schemas"] = dict(
                sorted({**components["schemas"], **(schemas or {})}.items())
            )
            components["securitySchemes"] = {
                SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A Pulsar-format token: a JWT whose `sub` claim is the role.",
                }
            }
            for path, operations in schema["paths"].items():
                if path.startswith(PROTECTED_PREFIXES):
                    for operation in operations.values():
                        operation["security"] = [{SCHEME: []}]
            app.openapi_schema = tidy(schema)
        return app.openapi_schema

    return openapi
