"""The committed spec says what the server does, in forms client generators take as meant:
no 422 (the server answers 400), integer bounds as integers, an optional body that is left
out rather than null, the request limits' answers, and a role pattern that the server and
any JSON Schema validator read alike."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from app.api.spec import integer_bound, tidy
from app.openapi import SPEC_PATH
from app.quota.schemas import NAMESPACE_REF_PATTERN, UsageReport
from app.schemas import INT64_MAX, ROLE_PATTERN, Role

SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
METHODS = {"get", "put", "post", "delete", "patch"}


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in SPEC["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def nodes(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for child in value.values():
            yield from nodes(child)
    elif isinstance(value, list):
        for child in value:
            yield from nodes(child)


def test_no_operation_documents_422() -> None:
    for method, path, operation in operations():
        assert "422" not in operation["responses"], (method, path)
    assert "HTTPValidationError" not in SPEC["components"]["schemas"]
    assert "HTTPValidationError" not in SPEC_PATH.read_text(encoding="utf-8")


def test_operations_with_parameters_or_bodies_document_400() -> None:
    for method, path, operation in operations():
        if operation.get("parameters") or operation.get("requestBody"):
            assert "400" in operation["responses"], (method, path)


def test_operations_with_bodies_document_413_and_415() -> None:
    with_bodies = [(m, p, o) for m, p, o in operations() if "requestBody" in o]
    assert len(with_bodies) >= 8
    for method, path, operation in with_bodies:
        for status in ("413", "415"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)


def test_integer_bounds_are_integers() -> None:
    integers = [node for node in nodes(SPEC) if node.get("type") == "integer"]
    bounds = [node[key] for node in integers for key in ("minimum", "maximum") if key in node]
    assert bounds
    assert all(type(bound) is int for bound in bounds), bounds
    assert INT64_MAX in bounds
    assert max(bounds) == INT64_MAX
    assert "9.223372036854776e+18" not in SPEC_PATH.read_text(encoding="utf-8")


def test_float_bounds_are_turned_back_exactly() -> None:
    assert integer_bound(float(INT64_MAX)) == INT64_MAX
    assert integer_bound(-float(2**63)) == -(2**63)
    assert integer_bound(2147483647.0) == 2147483647
    with pytest.raises(ValueError, match="not exact"):
        integer_bound(float(2**60 + 1))


def test_an_optional_body_is_left_out_not_null() -> None:
    body = SPEC["paths"]["/admin/v2/namespaces/{tenant}/{namespace}"]["put"]["requestBody"]
    assert not body.get("required", False)
    schema = body["content"]["application/json"]["schema"]
    assert schema["type"] == "object"
    assert "anyOf" not in schema


def test_tidy_leaves_required_bodies_alone() -> None:
    nullable = {"anyOf": [{"type": "object"}, {"type": "null"}], "title": "X"}
    document = {
        "paths": {
            "/a": {
                "put": {"requestBody": {"required": True, "content": {"j": {"schema": nullable}}}}
            },
            "/b": {"put": {"requestBody": {"content": {"j": {"schema": dict(nullable)}}}}},
        }
    }
    tidy(document)
    assert document["paths"]["/a"]["put"]["requestBody"]["content"]["j"]["schema"] == nullable
    assert document["paths"]["/b"]["put"]["requestBody"]["content"]["j"]["schema"] == {
        "type": "object",
        "title": "X",
    }


# Characters on which regular expression engines disagree about `\s`, and others.
CHARACTERS = [
    "\x00", "\t", "\n", "\x1f", " ", "\x7f", "\x80", "\x85", "\x9f", "\xa0", "\u1680",
    "\u2000", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
    "\ufeff", "é", "@", ".", "/", "😀",
]  # fmt: skip
ALLOWED = "é@./😀\u200b"


class TestRolePattern:
    def test_the_spec_carries_the_server_pattern(self) -> None:
        found = [node for node in nodes(SPEC) if node.get("pattern") == ROLE_PATTERN]
        assert len(found) >= 3  # the path parameters and the tenant's adminRoles

    def test_the_pattern_lists_its_characters(self) -> None:
        # Shorthand classes mean different things to different engines: `\s` has U+0085 in
        # Python's and Rust's, not in ECMAScript's (which JSON Schema uses), and U+FEFF in
        # ECMAScript's only. Explicit characters mean the same to all.
        assert not re.search(r"\\[sSwWdDbB]", ROLE_PATTERN)

    @pytest.mark.parametrize("character", CHARACTERS)
    def test_spec_and_server_agree(self, character: str) -> None:
        role = f"a{character}b"
        # Without the anchors: Python's `$` also matches before a final newline.
        in_spec = re.fullmatch(ROLE_PATTERN.removeprefix("^").removesuffix("$"), role) is not None
        try:
            TypeAdapter(Role).validate_python(role)
            on_server = True
        except ValidationError:
            on_server = False
        assert in_spec == on_server
        assert in_spec == (character in ALLOWED)


def test_the_spec_refuses_the_report_keys_the_server_refuses() -> None:
    namespaces = SPEC["components"]["schemas"]["UsageReport"]["properties"]["namespaces"]
    assert list(namespaces["patternProperties"]) == [NAMESPACE_REF_PATTERN]
    assert namespaces["additionalProperties"] is False
    with pytest.raises(ValidationError):
        UsageReport.model_validate({"sentAtMs": 0, "intervalMs": 1, "namespaces": {"t/.": {}}})
