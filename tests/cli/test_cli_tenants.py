"""``rgadmin tenants``: pulsar-admin's verbs against a real server, and the group of a whole
tenant."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.cli.conftest import Rgadmin, failure, ok
from tests.conftest import SUPERUSER


def tenant(rgadmin: Rgadmin, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(ok(rgadmin("tenants", "get", name)))
    return found


def test_create_with_admin_roles_allows_every_cluster_the_server_lists(
    rgadmin: Rgadmin, server: str
) -> None:
    listed = httpx.get(
        f"{server}/admin/v2/clusters",
        headers={"Authorization": f"Bearer {rgadmin.token(SUPERUSER)}"},
    )
    assert listed.status_code == 200, listed.text
    assert listed.json(), "the server lists its cluster"
    ok(rgadmin("tenants", "create", "team-a", "--admin-roles", "a,b", "-r", "c"))
    assert tenant(rgadmin, "team-a") == {
        "adminRoles": ["a", "b", "c"],
        "allowedClusters": listed.json(),
    }


def test_create_with_allowed_clusters_and_no_roles(rgadmin: Rgadmin) -> None:
    ok(rgadmin("tenants", "create", "t", "-c", "east, west"))
    assert tenant(rgadmin, "t") == {"adminRoles": [], "allowedClusters": ["east", "west"]}


def test_create_of_an_existing_tenant_is_409(rgadmin: Rgadmin) -> None:
    ok(rgadmin("tenants", "create", "t", "-r", "a"))
    assert failure(rgadmin("tenants", "create", "t", "-r", "b")).endswith("(HTTP 409)")
    assert tenant(rgadmin, "t")["adminRoles"] == ["a"]


def test_list(rgadmin: Rgadmin) -> None:
    for name in ("t2", "t1"):
        ok(rgadmin("tenants", "create", name))
    assert sorted(ok(rgadmin("tenants", "list")).splitlines()) == ["t1", "t2"]


def test_update_keeps_what_is_not_given(rgadmin: Rgadmin) -> None:
    ok(rgadmin("tenants", "create", "t", "-r", "a", "-c", "east"))
    ok(rgadmin("tenants", "update", "t", "--admin-roles", "b,c"))
    assert tenant(rgadmin, "t") == {"adminRoles": ["b", "c"], "allowedClusters": ["east"]}
    ok(rgadmin("tenants", "update", "t", "--allowed-clusters", "west"))
    assert tenant(rgadmin, "t") == {"adminRoles": ["b", "c"], "allowedClusters": ["west"]}


def test_update_and_get_of_a_missing_tenant_are_404(rgadmin: Rgadmin) -> None:
    assert failure(rgadmin("tenants", "update", "nope", "-r", "a", "-c", "x")).endswith(
        "(HTTP 404)"
    )
    assert failure(rgadmin("tenants", "update", "nope", "-r", "a")).endswith("(HTTP 404)")
    assert failure(rgadmin("tenants", "get", "nope")) == "Tenant does not exist (HTTP 404)"


def test_delete_and_409_while_it_has_namespaces(rgadmin: Rgadmin) -> None:
    ok(rgadmin("tenants", "create", "t"))
    ok(rgadmin("namespaces", "create", "t/ns"))
    assert failure(rgadmin("tenants", "delete", "t")).endswith("(HTTP 409)")
    ok(rgadmin("namespaces", "delete", "t/ns"))
    ok(rgadmin("tenants", "delete", "t"))
    assert ok(rgadmin("tenants", "list")) == ""


def test_resource_group_of_a_tenant(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    ok(rgadmin("tenants", "create", "t"))
    assert ok(rgadmin("tenants", "get-resource-group", "t")) == "null\n"
    ok(rgadmin("tenants", "set-resource-group", "t", "-rgn", "rg"))
    assert ok(rgadmin("tenants", "get-resource-group", "t")) == "rg\n"
    assert failure(rgadmin("resourcegroups", "delete", "rg")).endswith("(HTTP 412)")
    ok(rgadmin("tenants", "remove-resource-group", "t"))
    assert ok(rgadmin("tenants", "get-resource-group", "t")) == "null\n"


def test_attaching_a_missing_group_is_412(rgadmin: Rgadmin) -> None:
    ok(rgadmin("tenants", "create", "t"))
    message = failure(rgadmin("tenants", "set-resource-group", "t", "--resource-group-name", "x"))
    assert message == "ResourceGroup does not exist (HTTP 412)"


def test_a_tenant_admin_may_read_its_tenant_but_not_attach_to_it(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    ok(rgadmin("tenants", "create", "t", "-r", "t-admin"))
    assert tenant(rgadmin, "t")["adminRoles"] == ["t-admin"]
    assert ok(rgadmin("tenants", "get", "t", role="t-admin"))
    result = rgadmin("tenants", "set-resource-group", "t", "-rgn", "rg", role="t-admin")
    assert failure(result).endswith("(HTTP 403)")
