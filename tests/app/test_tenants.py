"""``/admin/v2/tenants``: create, update, read, list and delete; names, bodies and roles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import create_namespace, create_tenant, grant, reason

TENANTS = "/admin/v2/tenants"
# "%2E" and "%2E%2E" reach the server as "." and "..": clients normalise them unencoded.
BAD_NAMES = ["a b", "é", "x" * 256, "t%0A", "%20", "%2E", "%2E%2E"]

Auth = Callable[[str], dict[str, str]]


def make_namespace_with_client(client: TestClient) -> None:
    """Tenant ``t`` administered by ``tenant-admin``, namespace ``t/ns`` used by role ``job``."""
    create_tenant(client, "t", ["tenant-admin"])
    create_namespace(client, "t/ns")
    grant(client, "t/ns", "job", "produce", "consume")


class TestCreate:
    def test_create_stores_roles_and_clusters(self, client: TestClient) -> None:
        body = {"adminRoles": ["alice", "bob"], "allowedClusters": ["standalone"]}
        assert client.put(f"{TENANTS}/t", json=body).status_code == 204
        assert client.get(f"{TENANTS}/t").json() == body

    def test_empty_object_creates_a_tenant_without_admins(self, client: TestClient) -> None:
        assert client.put(f"{TENANTS}/t", json={}).status_code == 204
        assert client.get(f"{TENANTS}/t").json() == {"adminRoles": [], "allowedClusters": []}

    def test_existing_is_409_and_changes_nothing(self, client: TestClient, unchanged: Any) -> None:
        create_tenant(client, "t", ["alice"])
        with unchanged():
            response = client.put(f"{TENANTS}/t", json={"adminRoles": ["mallory"]})
        assert reason(response, 409) == "Tenant already exists"

    def test_longest_and_punctuated_names_are_accepted(self, client: TestClient) -> None:
        for name in ("x" * 255, "a_b-c=d:e.f"):
            assert client.put(f"{TENANTS}/{name}", json={}).status_code == 204
            assert client.get(f"{TENANTS}/{name}").status_code == 200


class TestUpdate:
    def test_replaces_roles_and_clusters(self, client: TestClient) -> None:
        client.put(f"{TENANTS}/t", json={"adminRoles": ["alice"], "allowedClusters": ["c1"]})
        body = {"adminRoles": ["bob"], "allowedClusters": ["c2", "c3"]}
        assert client.post(f"{TENANTS}/t", json=body).status_code == 204
        assert client.get(f"{TENANTS}/t").json() == body

    def test_empty_object_clears_roles_and_clusters(self, client: TestClient) -> None:
        client.put(f"{TENANTS}/t", json={"adminRoles": ["alice"], "allowedClusters": ["c1"]})
        assert client.post(f"{TENANTS}/t", json={}).status_code == 204
        assert client.get(f"{TENANTS}/t").json() == {"adminRoles": [], "allowedClusters": []}

    def test_removed_admin_loses_access(self, client: TestClient, auth: Auth) -> None:
        create_tenant(client, "t", ["alice"])
        assert client.get(f"{TENANTS}/t", headers=auth("alice")).status_code == 200
        client.post(f"{TENANTS}/t", json={"adminRoles": ["bob"]})
        assert client.get(f"{TENANTS}/t", headers=auth("alice")).status_code == 403
        assert client.get(f"{TENANTS}/t", headers=auth("bob")).status_code == 200

    def test_missing_is_404_and_creates_nothing(self, client: TestClient, unchanged: Any) -> None:
        with unchanged():
            response = client.post(f"{TENANTS}/nope", json={"adminRoles": ["alice"]})
        assert reason(response, 404) == "Tenant does not exist"


class TestGetAndList:
    def test_get_missing_is_404(self, client: TestClient) -> None:
        assert reason(client.get(f"{TENANTS}/nope"), 404) == "Tenant does not exist"

    def test_list_is_sorted_names(self, client: TestClient) -> None:
        assert client.get(TENANTS).json() == []
        for name in ("b", "a", "c"):
            create_tenant(client, name)
        assert client.get(TENANTS).json() == ["a", "b", "c"]


class TestDelete:
    def test_delete(self, client: TestClient) -> None:
        create_tenant(client, "t")
        assert client.delete(f"{TENANTS}/t").status_code == 204
        assert client.get(f"{TENANTS}/t").status_code == 404
        assert client.get(TENANTS).json() == []

    def test_missing_is_404(self, client: TestClient) -> None:
        assert reason(client.delete(f"{TENANTS}/nope"), 404) == "Tenant does not exist"

    def test_with_namespaces_is_409_until_they_are_gone(
        self, client: TestClient, unchanged: Any
    ) -> None:
        make_namespace_with_client(client)
        with unchanged():
            response = client.delete(f"{TENANTS}/t")
        assert reason(response, 409) == "The tenant still has active namespaces"
        assert client.delete("/admin/v2/namespaces/t/ns").status_code == 204
        assert client.delete(f"{TENANTS}/t").status_code == 204

    def test_tenant_with_a_group_attached_can_be_deleted(self, client: TestClient) -> None:
        client.put("/admin/v2/resourcegroups/rg", json={})
        create_tenant(client, "t")
        client.post(f"{TENANTS}/t/resourcegroup/rg")
        assert client.delete(f"{TENANTS}/t").status_code == 204
        # Nothing points at the group any more.
        assert client.delete("/admin/v2/resourcegroups/rg").status_code == 204


class TestBadNames:
    @pytest.mark.parametrize("name", BAD_NAMES)
    @pytest.mark.parametrize("method", ["PUT", "POST", "GET", "DELETE"])
    def test_bad_name_is_400_naming_the_tenant(
        self, client: TestClient, unchanged: Any, method: str, name: str
    ) -> None:
        body = {} if method in ("PUT", "POST") else None
        with unchanged():
            response = client.request(method, f"{TENANTS}/{name}", json=body)
        assert "Invalid tenant name" in reason(response, 400)


class TestBadBodies:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ({"adminRoles": ["a"], "owner": "x"}, "Unknown field 'owner'"),
            ({"adminroles": ["a"]}, "Unknown field 'adminroles'"),
            ({"adminRoles": "alice"}, "adminRoles"),
            ({"adminRoles": ["a b"]}, "adminRoles"),
            ({"adminRoles": ["tab\tin"]}, "adminRoles"),
            ({"adminRoles": [1]}, "adminRoles"),
            ({"allowedClusters": {"c": 1}}, "allowedClusters"),
            ([], "Request body must be a JSON object"),
            ("alice", "Request body must be a JSON object"),
        ],
    )
    @pytest.mark.parametrize("method", ["PUT", "POST"])
    def test_invalid_body_is_400_naming_the_problem(
        self, client: TestClient, unchanged: Any, method: str, body: Any, expected: str
    ) -> None:
        create_tenant(client, "t", ["alice"])
        path = f"{TENANTS}/{'new' if method == 'PUT' else 't'}"
        with unchanged():
            response = client.request(method, path, json=body)
        assert expected in reason(response, 400)

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (b"", "Request body is required"),
            (b"null", "Request body must be a JSON object"),
            (b"{", "Request body is not valid JSON"),
            (b'{"adminRoles": ["a"', "Request body is not valid JSON"),
            (b"not json", "Request body is not valid JSON"),
            (b"\xff\xfe", "Request body is not valid JSON"),
        ],
    )
    @pytest.mark.parametrize("method", ["PUT", "POST"])
    def test_empty_truncated_or_non_json_body_is_400(
        self, client: TestClient, unchanged: Any, method: str, raw: bytes, expected: str
    ) -> None:
        create_tenant(client, "t", ["alice"])
        path = f"{TENANTS}/{'new' if method == 'PUT' else 't'}"
        with unchanged():
            response = client.request(
                method, path, content=raw, headers={"Content-Type": "application/json"}
            )
        assert reason(response, 400) == expected

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
    @pytest.mark.parametrize("method", ["PUT", "POST"])
    def test_body_not_sent_as_json_is_415(
        self, client: TestClient, unchanged: Any, method: str, content_type: str
    ) -> None:
        create_tenant(client, "t", ["alice"])
        path = f"{TENANTS}/{'new' if method == 'PUT' else 't'}"
        with unchanged():
            response = client.request(
                method,
                path,
                content=b'{"adminRoles": ["bob"]}',
                headers={"Content-Type": content_type},
            )
        assert content_type in reason(response, 415)


class TestRoles:
    @pytest.mark.parametrize("role", ["tenant-admin", "job", "stranger"])
    def test_only_superusers_create_update_delete_and_list(
        self, client: TestClient, auth: Auth, unchanged: Any, role: str
    ) -> None:
        make_namespace_with_client(client)
        create_tenant(client, "empty", ["tenant-admin"])
        headers = auth(role)
        with unchanged():
            responses = [
                client.get(TENANTS, headers=headers),
                client.put(f"{TENANTS}/new", json={"adminRoles": [role]}, headers=headers),
                client.post(f"{TENANTS}/t", json={"adminRoles": [role]}, headers=headers),
                client.delete(f"{TENANTS}/empty", headers=headers),
            ]
        for response in responses:
            assert reason(response, 403) == "Only superusers may do this"

    def test_tenant_admin_reads_its_own_tenant_only(self, client: TestClient, auth: Auth) -> None:
        make_namespace_with_client(client)
        create_tenant(client, "other", ["other-admin"])
        admin = auth("tenant-admin")
        response = client.get(f"{TENANTS}/t", headers=admin)
        assert response.json() == {"adminRoles": ["tenant-admin"], "allowedClusters": []}
        assert reason(client.get(f"{TENANTS}/other", headers=admin), 403)

    @pytest.mark.parametrize("role", ["job", "stranger"])
    def test_clients_and_strangers_cannot_read_a_tenant(
        self, client: TestClient, auth: Auth, role: str
    ) -> None:
        make_namespace_with_client(client)
        assert reason(client.get(f"{TENANTS}/t", headers=auth(role)), 403)
