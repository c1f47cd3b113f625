"""The PIP-82 draft's spellings: each answers and writes exactly as its canonical route does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.conftest import SUPERUSER, dump, empty_tables
from tests.factories import create_group, create_namespace, create_tenant

Auth = Callable[[str], dict[str, str]]

DRAFT_OPERATIONS = {
    ("get", "/admin/v2/resourcegroup"),
    ("get", "/admin/v2/resourcegroup/{rg}"),
    ("put", "/admin/v2/resourcegroup/{rg}"),
    ("delete", "/admin/v2/resourcegroup/{rg}"),
    ("put", "/admin/v2/namespaces/{tenant}/{namespace}/resourcegroup/{rg}"),
    ("put", "/admin/v2/tenants/{tenant}/resourcegroup/{rg}"),
}


def canonical(method: str, path: str) -> tuple[str, str]:
    """The canonical spelling of a draft request: plural group path, POST to attach."""
    if path.startswith("/admin/v2/resourcegroup"):
        return method, path.replace("/admin/v2/resourcegroup", "/admin/v2/resourcegroups", 1)
    assert method == "PUT"
    return "POST", path


def make_world(client: TestClient) -> None:
    """Groups ``rg1`` (attached to namespace ``t/ns``) and ``rg2``; tenant ``t`` administered by
    ``tenant-admin``; role ``job`` may produce to ``t/ns``."""
    create_group(client, "rg1", publishRateInMsgs=10)
    create_group(client, "rg2")
    create_tenant(client, "t", ["tenant-admin"])
    create_namespace(client, "t/ns", group="rg1", producers=["job"])


NS_GROUP = "/admin/v2/namespaces/t/ns/resourcegroup"
TENANT_GROUP = "/admin/v2/tenants/t/resourcegroup"

# (method, draft path, JSON body, role, expected status)
CASES = [
    ("GET", "/admin/v2/resourcegroup", None, SUPERUSER, 200),
    ("GET", "/admin/v2/resourcegroup", None, "tenant-admin", 403),
    ("GET", "/admin/v2/resourcegroup/rg1", None, SUPERUSER, 200),
    ("GET", "/admin/v2/resourcegroup/rg1", None, "tenant-admin", 200),
    ("GET", "/admin/v2/resourcegroup/rg2", None, "tenant-admin", 403),
    ("GET", "/admin/v2/resourcegroup/nope", None, SUPERUSER, 404),
    ("PUT", "/admin/v2/resourcegroup/rg1", {"dispatchRateInMsgs": 5}, SUPERUSER, 204),
    ("PUT", "/admin/v2/resourcegroup/new", {}, SUPERUSER, 204),
    ("PUT", "/admin/v2/resourcegroup/rg1", {"dispatchRate": 5}, SUPERUSER, 400),
    ("PUT", "/admin/v2/resourcegroup/a b", {}, SUPERUSER, 400),
    ("PUT", "/admin/v2/resourcegroup/rg1", {}, "tenant-admin", 403),
    ("DELETE", "/admin/v2/resourcegroup/rg2", None, SUPERUSER, 204),
    ("DELETE", "/admin/v2/resourcegroup/rg1", None, SUPERUSER, 412),
    ("DELETE", "/admin/v2/resourcegroup/nope", None, SUPERUSER, 404),
    ("DELETE", "/admin/v2/resourcegroup/rg2", None, "tenant-admin", 403),
    ("PUT", f"{NS_GROUP}/rg2", None, SUPERUSER, 204),
    ("PUT", f"{NS_GROUP}/rg1", None, "tenant-admin", 204),
    ("PUT", f"{NS_GROUP}/rg2", None, "tenant-admin", 403),
    ("PUT", f"{NS_GROUP}/rg2", None, "job", 403),
    ("PUT", f"{NS_GROUP}/nope", None, SUPERUSER, 412),
    ("PUT", "/admin/v2/namespaces/t/nope/resourcegroup/rg2", None, SUPERUSER, 404),
    ("PUT", f"{TENANT_GROUP}/rg2", None, SUPERUSER, 204),
    ("PUT", f"{TENANT_GROUP}/rg2", None, "tenant-admin", 403),
    ("PUT", f"{TENANT_GROUP}/nope", None, SUPERUSER, 412),
    ("PUT", "/admin/v2/tenants/nope/resourcegroup/rg2", None, SUPERUSER, 404),
]


@pytest.mark.parametrize(("method", "path", "body", "role", "status"), CASES, ids=str)
def test_draft_route_behaves_like_the_canonical_one(
    client: TestClient,
    engine: Engine,
    auth: Auth,
    method: str,
    path: str,
    body: Any,
    role: str,
    status: int,
) -> None:
    outcomes = []
    for request_method, request_path in ((method, path), canonical(method, path)):
        make_world(client)
        response = client.request(request_method, request_path, json=body, headers=auth(role))
        content = response.json() if response.content else None
        outcomes.append((response.status_code, content, dump(engine)))
        empty_tables(engine)
    (draft_status, draft_body, _), canonical_outcome = outcomes
    assert draft_status == status, draft_body
    if status >= 400:
        assert list(draft_body) == ["reason"]
    assert outcomes[0] == canonical_outcome


def test_draft_writes_are_visible_through_the_canonical_routes(client: TestClient) -> None:
    make_world(client)
    response = client.put("/admin/v2/resourcegroup/rg3", json={"publishRateInBytes": 7})
    assert response.status_code == 204
    assert client.get("/admin/v2/resourcegroups/rg3").json()["publishRateInBytes"] == 7
    assert client.put(f"{NS_GROUP}/rg3").status_code == 204
    assert client.get(NS_GROUP).json() == "rg3"
    assert client.put(f"{TENANT_GROUP}/rg2").status_code == 204
    assert client.get(TENANT_GROUP).json() == "rg2"
    assert client.get("/admin/v2/resourcegroup").json() == ["rg1", "rg2", "rg3"]
    client.delete(NS_GROUP)
    assert client.delete("/admin/v2/resourcegroup/rg3").status_code == 204
    assert client.get("/admin/v2/resourcegroups/rg3").status_code == 404


def test_only_the_draft_spellings_are_deprecated(app: FastAPI) -> None:
    operations = {
        (method, path): operation
        for path, item in app.openapi()["paths"].items()
        for method, operation in item.items()
    }
    deprecated = {key for key, operation in operations.items() if operation.get("deprecated")}
    assert deprecated == DRAFT_OPERATIONS
    for method, path in DRAFT_OPERATIONS:
        canonical_method, canonical_path = canonical(method.upper(), path)
        assert not operations[canonical_method.lower(), canonical_path].get("deprecated")
