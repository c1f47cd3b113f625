"""The committed ``openapi.yaml`` is the app's own spec, and its operationIds are stable."""

from __future__ import annotations

import yaml

from app.openapi import SPEC_PATH, render


def test_committed_spec_is_current() -> None:
    assert SPEC_PATH.read_text(encoding="utf-8") == render(), (
        "openapi.yaml is stale: regenerate it with `python -m app.openapi`"
    )


def test_operation_ids_are_endpoint_names() -> None:
    spec = yaml.safe_load(render())
    ids = [op["operationId"] for path in spec["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
    assert "get_resource_group" in ids
    assert "set_namespace_resource_group_draft_put" in ids


def test_bearer_auth_is_documented() -> None:
    spec = yaml.safe_load(render())
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
