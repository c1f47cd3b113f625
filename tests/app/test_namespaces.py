"""``/admin/v2/namespaces``: create, list, delete, permissions, and who may do each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import create_namespace, create_tenant, grant, reason

NAMESPACES = "/admin/v2/namespaces"
# "%2E" and "%2E%2E" reach the server as "." and "..": clients normalise them unencoded.
BAD_NAMES = ["a b", "é", "x" * 256, "%20", "%2E", "%2E%2E"]
BAD_ROLES = ["a b", "x" * 256, "%20", "tab%09"]

Auth = Callable[[str], dict[str, str]]


@pytest.fixture
def tenants(client: TestClient) -> None:
    """Tenants ``t`` (admin ``tenant-admin``) and ``other`` (admin ``other-admin``), each with
    a namespace ``ns`` that role ``job`` may produce to and consume from."""
    for tenant, admin in (("t", "tenant-admin"), ("other", "other-admin")):
        create_tenant(client, tenant, [admin])
        create_namespace(client, f"{tenant}/ns")
        grant(client, f"{tenant}/ns", "job", "produce", "consume")


def permissions(client: TestClient, path: str = f"{NAMESPACES}/t/ns") -> dict[str, set[str]]:
    response = client.get(f"{path}/permissions")
    assert response.status_code == 200, response.text
    return {role: set(actions) for role, actions in response.json().items()}


@pytest.mark.usefixtures("tenants")
class TestCreate:
    def test_create_and_list(self, client: TestClient) -> None:
        assert client.put(f"{NAMESPACES}/t/a").status_code == 204
        assert client.get(f"{NAMESPACES}/t").json() == ["t/a", "t/ns"]

    @pytest.mark.parametrize("policies", [{}, {"bundles": {"numBundles": 4}}])
    def test_policies_body_is_accepted(self, client: TestClient, policies: Any) -> None:
        assert client.put(f"{NAMESPACES}/t/a", json=policies).status_code == 204
        assert "t/a" in client.get(f"{NAMESPACES}/t").json()

    def test_missing_tenant_is_404(self, client: TestClient, unchanged: Any) -> None:
        with unchanged():
            response = client.put(f"{NAMESPACES}/nope/ns")
        assert reason(response, 404) == "Tenant does not exist"

    def test_existing_is_409_and_changes_nothing(self, client: TestClient, unchanged: Any) -> None:
        with unchanged():
            response = client.put(f"{NAMESPACES}/t/ns")
        assert reason(response, 409) == "Namespace already exists"

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (b"[]", "Request body must be a JSON object"),
            (b'"policies"', "Request body must be a JSON object"),
            (b"{", "Request body is not valid JSON"),
            (b"not json", "Request body is not valid JSON"),
        ],
    )
    def test_bad_policies_body_is_400(
        self, client: TestClient, unchanged: Any, raw: bytes, expected: str
    ) -> None:
        with unchanged():
            response = client.put(
                f"{NAMESPACES}/t/a", content=raw, headers={"Content-Type": "application/json"}
            )
        assert reason(response, 400) == expected

    @pytest.mark.parametrize("name", BAD_NAMES)
    def test_bad_names_are_400_naming_which(
        self, client: TestClient, unchanged: Any, name: str
    ) -> None:
        with unchanged():
            bad_namespace = client.put(f"{NAMESPACES}/t/{name}")
            bad_tenant = client.put(f"{NAMESPACES}/{name}/ns")
        assert "Invalid namespace name" in reason(bad_namespace, 400)
        assert "Invalid tenant name" in reason(bad_tenant, 400)


@pytest.mark.usefixtures("tenants")
class TestList:
    def test_sorted_and_only_the_tenants_own(self, client: TestClient) -> None:
        for name in ("b", "a"):
            client.put(f"{NAMESPACES}/t/{name}")
        assert client.get(f"{NAMESPACES}/t").json() == ["t/a", "t/b", "t/ns"]
        assert client.get(f"{NAMESPACES}/other").json() == ["other/ns"]

    def test_tenant_without_namespaces_is_an_empty_list(self, client: TestClient) -> None:
        client.put("/admin/v2/tenants/empty", json={})
        assert client.get(f"{NAMESPACES}/empty").json() == []

    def test_missing_tenant_is_404(self, client: TestClient) -> None:
        assert reason(client.get(f"{NAMESPACES}/nope"), 404) == "Tenant does not exist"


@pytest.mark.usefixtures("tenants")
class TestDelete:
    def test_delete(self, client: TestClient) -> None:
        assert client.delete(f"{NAMESPACES}/t/ns").status_code == 204
        assert client.get(f"{NAMESPACES}/t").json() == []
        assert client.get(f"{NAMESPACES}/other").json() == ["other/ns"]

    @pytest.mark.parametrize("path", ["t/nope", "nope/ns"])
    def test_missing_is_404(self, client: TestClient, unchanged: Any, path: str) -> None:
        with unchanged():
            response = client.delete(f"{NAMESPACES}/{path}")
        assert reason(response, 404) == "Namespace does not exist"

    def test_removes_its_permissions_and_attachment(self, client: TestClient) -> None:
        client.put("/admin/v2/resourcegroups/rg", json={})
        assert client.post(f"{NAMESPACES}/t/ns/resourcegroup/rg").status_code == 204
        assert client.delete(f"{NAMESPACES}/t/ns").status_code == 204
        client.put(f"{NAMESPACES}/t/ns")
        assert client.get(f"{NAMESPACES}/t/ns/permissions").json() == {}
        assert client.get(f"{NAMESPACES}/t/ns/resourcegroup").json() is None
        # The other tenant's namespace of the same name keeps its grants.
        assert permissions(client, f"{NAMESPACES}/other/ns") == {"job": {"produce", "consume"}}
        # And the group is no longer in use.
        assert client.delete("/admin/v2/resourcegroups/rg").status_code == 204


@pytest.mark.usefixtures("tenants")
class TestPermissions:
    def test_grant_and_get(self, client: TestClient) -> None:
        response = client.post(f"{NAMESPACES}/t/ns/permissions/reader", json=["consume"])
        assert response.status_code == 204
        assert permissions(client) == {"job": {"produce", "consume"}, "reader": {"consume"}}

    def test_grant_replaces_the_roles_actions(self, client: TestClient) -> None:
        response = client.post(f"{NAMESPACES}/t/ns/permissions/job", json=["consume", "functions"])
        assert response.status_code == 204
        assert permissions(client) == {"job": {"consume", "functions"}}

    def test_grant_nothing_leaves_the_role_without_actions(self, client: TestClient) -> None:
        assert client.post(f"{NAMESPACES}/t/ns/permissions/job", json=[]).status_code == 204
        assert permissions(client) == {"job": set()}

    def test_revoke(self, client: TestClient) -> None:
        assert client.delete(f"{NAMESPACES}/t/ns/permissions/job").status_code == 204
        assert permissions(client) == {}
        assert permissions(client, f"{NAMESPACES}/other/ns") == {"job": {"produce", "consume"}}

    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            (["write"], "Invalid value for '0'"),
            (["produce", "Consume"], "Invalid value for '1'"),
            ([1], "Invalid value for '0'"),
            ({"actions": ["produce"]}, "Request body must be a JSON array"),
            ("produce", "Request body must be a JSON array"),
            (None, "Request body is required"),
        ],
    )
    def test_bad_actions_are_400(
        self, client: TestClient, unchanged: Any, body: Any, expected: str
    ) -> None:
        with unchanged():
            response = client.post(f"{NAMESPACES}/t/ns/permissions/job", json=body)
            new_role = client.post(f"{NAMESPACES}/t/ns/permissions/new", json=body)
        assert expected in reason(response, 400)
        assert reason(new_role, 400)

    @pytest.mark.parametrize("raw", [b"[", b'["produce"', b"produce", b"\xff\xfe"])
    def test_non_json_body_is_400(self, client: TestClient, unchanged: Any, raw: bytes) -> None:
        with unchanged():
            response = client.post(
                f"{NAMESPACES}/t/ns/permissions/job",
                content=raw,
                headers={"Content-Type": "application/json"},
            )
        assert reason(response, 400) == "Request body is not valid JSON"

    @pytest.mark.parametrize("role", ["svc@clients", "José", "CN=spark,O=acme"])
    def test_roles_are_token_subjects_not_names(self, client: TestClient, role: str) -> None:
        assert (
            client.post(f"{NAMESPACES}/t/ns/permissions/{role}", json=["consume"]).status_code
            == 204
        )
        assert client.get(f"{NAMESPACES}/t/ns/permissions").json()[role] == ["consume"]

    @pytest.mark.parametrize("role", BAD_ROLES)
    def test_bad_role_name_is_400(self, client: TestClient, unchanged: Any, role: str) -> None:
        with unchanged():
            response = client.post(f"{NAMESPACES}/t/ns/permissions/{role}", json=["produce"])
        assert "Invalid role name" in reason(response, 400)

    @pytest.mark.parametrize("path", ["t/nope", "nope/ns"])
    def test_missing_namespace_is_404(self, client: TestClient, unchanged: Any, path: str) -> None:
        base = f"{NAMESPACES}/{path}/permissions"
        with unchanged():
            responses = [
                client.get(base),
                client.post(f"{base}/job", json=["produce"]),
                client.delete(f"{base}/job"),
            ]
        for response in responses:
            assert reason(response, 404) == "Namespace does not exist"


@pytest.mark.usefixtures("tenants")
class TestPolicies:
    def test_pulsar_shape_with_grants_cluster_and_own_group(
        self, client: TestClient, auth: Auth
    ) -> None:
        assert client.put("/admin/v2/resourcegroups/rg", json={}).status_code == 204
        assert client.post(f"{NAMESPACES}/t/ns/resourcegroup/rg").status_code == 204
        response = client.get(f"{NAMESPACES}/t/ns", headers=auth("tenant-admin"))
        assert response.status_code == 200, response.text
        assert response.json() == {
            "auth_policies": {
                "namespace_auth": {"job": ["consume", "produce"]},
                "destination_auth": {},
                "subscription_auth_roles": {},
            },
            "replication_clusters": ["standalone"],
            "resource_group_name": "rg",
            "deleted": False,
        }

    def test_a_group_inherited_from_the_tenant_is_not_the_namespaces_own(
        self, client: TestClient
    ) -> None:
        assert client.put("/admin/v2/resourcegroups/rg", json={}).status_code == 204
        assert client.post("/admin/v2/tenants/t/resourcegroup/rg").status_code == 204
        assert client.get(f"{NAMESPACES}/t/ns").json()["resource_group_name"] is None

    @pytest.mark.parametrize("path", ["t/nope", "nope/ns"])
    def test_missing_is_404(self, client: TestClient, path: str) -> None:
        reason(client.get(f"{NAMESPACES}/{path}"), 404)


def requests_on(tenant: str) -> list[tuple[str, str, Any]]:
    """Every namespace and permission request on a tenant: (method, path, JSON body)."""
    base = f"{NAMESPACES}/{tenant}"
    return [
        ("GET", base, None),
        ("GET", f"{base}/ns", None),
        ("PUT", f"{base}/new", None),
        ("DELETE", f"{base}/ns", None),
        ("GET", f"{base}/ns/permissions", None),
        ("POST", f"{base}/ns/permissions/job", ["produce", "consume", "functions"]),
        ("POST", f"{base}/ns/permissions/someone", ["consume"]),
        ("DELETE", f"{base}/ns/permissions/job", None),
    ]


@pytest.mark.usefixtures("tenants")
class TestRoles:
    def test_tenant_admin_manages_its_tenant(self, client: TestClient, auth: Auth) -> None:
        admin = auth("tenant-admin")
        assert client.put(f"{NAMESPACES}/t/new", headers=admin).status_code == 204
        assert client.get(f"{NAMESPACES}/t", headers=admin).json() == ["t/new", "t/ns"]
        grant = client.post(f"{NAMESPACES}/t/new/permissions/job", json=["consume"], headers=admin)
        assert grant.status_code == 204
        response = client.get(f"{NAMESPACES}/t/new/permissions", headers=admin)
        assert response.json() == {"job": ["consume"]}
        revoke = client.delete(f"{NAMESPACES}/t/new/permissions/job", headers=admin)
        assert revoke.status_code == 204
        assert client.get(f"{NAMESPACES}/t/new/permissions", headers=admin).json() == {}
        assert client.delete(f"{NAMESPACES}/t/new", headers=admin).status_code == 204
        assert client.get(f"{NAMESPACES}/t", headers=admin).json() == ["t/ns"]

    @pytest.mark.parametrize(("method", "path", "body"), requests_on("other"), ids=str)
    def test_tenant_admin_is_403_on_another_tenant(
        self, client: TestClient, auth: Auth, unchanged: Any, method: str, path: str, body: Any
    ) -> None:
        with unchanged():
            response = client.request(method, path, json=body, headers=auth("tenant-admin"))
        assert reason(response, 403) == "Role tenant-admin is not an admin of tenant other"

    @pytest.mark.parametrize("role", ["job", "stranger"])
    @pytest.mark.parametrize(("method", "path", "body"), requests_on("t"), ids=str)
    def test_clients_and_strangers_are_403(
        self,
        client: TestClient,
        auth: Auth,
        unchanged: Any,
        method: str,
        path: str,
        body: Any,
        role: str,
    ) -> None:
        with unchanged():
            response = client.request(method, path, json=body, headers=auth(role))
        assert reason(response, 403)
