"""``/admin/v2/resourcegroups``: success, validation, roles, missing and in-use groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.factories import create_group, create_namespace, create_tenant

GROUPS = "/admin/v2/resourcegroups"
FIELDS = (
    "publishRateInMsgs",
    "publishRateInBytes",
    "dispatchRateInMsgs",
    "dispatchRateInBytes",
    "replicationDispatchRateInMsgs",
    "replicationDispatchRateInBytes",
)
ALL_UNLIMITED = dict.fromkeys(FIELDS, -1)

Auth = Callable[[str], dict[str, str]]


def make_tenant_with_group(client: TestClient, group: str, admin: str = "tenant-admin") -> None:
    create_group(client, group, publishRateInMsgs=10)
    create_tenant(client, "t", [admin])
    create_namespace(client, "t/ns", group=group, producers=["job"])


class TestPut:
    def test_create_defaults_omitted_fields_to_unlimited(self, client: TestClient) -> None:
        assert client.put(f"{GROUPS}/rg", json={"publishRateInMsgs": 100}).status_code == 204
        assert client.get(f"{GROUPS}/rg").json() == {**ALL_UNLIMITED, "publishRateInMsgs": 100}

    def test_update_keeps_omitted_and_null_fields(self, client: TestClient) -> None:
        client.put(f"{GROUPS}/rg", json={"publishRateInMsgs": 100, "dispatchRateInBytes": 7})
        response = client.put(
            f"{GROUPS}/rg", json={"publishRateInBytes": 2**40, "dispatchRateInBytes": None}
        )
        assert response.status_code == 204
        assert client.get(f"{GROUPS}/rg").json() == {
            **ALL_UNLIMITED,
            "publishRateInMsgs": 100,
            "publishRateInBytes": 2**40,
            "dispatchRateInBytes": 7,
        }

    def test_empty_object_creates_an_unlimited_group(self, client: TestClient) -> None:
        assert client.put(f"{GROUPS}/rg", json={}).status_code == 204
        assert client.get(f"{GROUPS}/rg").json() == ALL_UNLIMITED

    def test_zero_and_extremes_are_stored_as_given(self, client: TestClient) -> None:
        body = {
            "publishRateInMsgs": 0,
            "publishRateInBytes": 2**63 - 1,
            "dispatchRateInMsgs": 2**31 - 1,
            "dispatchRateInBytes": 0,
        }
        assert client.put(f"{GROUPS}/rg", json=body).status_code == 204
        assert client.get(f"{GROUPS}/rg").json() == {**ALL_UNLIMITED, **body}

    @pytest.mark.parametrize(
        ("body", "reason"),
        [
            ({"publishRateInMsgs": -2}, "publishRateInMsgs"),
            ({"publishRateInBytes": -100}, "publishRateInBytes"),
            ({"dispatchRateInMsgs": "10"}, "dispatchRateInMsgs"),
            ({"dispatchRateInBytes": 1.5}, "dispatchRateInBytes"),
            ({"publishRateInMsgs": 10.5}, "publishRateInMsgs"),
            ({"publishRateInMsgs": True}, "publishRateInMsgs"),
            ({"publishRateInMsgs": 2**31}, "publishRateInMsgs"),
            ({"replicationDispatchRateInMsgs": -(2**31) - 1}, "replicationDispatchRateInMsgs"),
            ({"publishRateInBytes": 2**63}, "publishRateInBytes"),
            ({"dispatchRateInBytes": 10**30}, "dispatchRateInBytes"),
            ({"publishRateInMsgs": [1]}, "publishRateInMsgs"),
            ({"publishRateInmsgs": 10}, "Unknown field 'publishRateInmsgs'"),
            ({"publishRateInMsgs": 10, "storageQuota": 1}, "Unknown field 'storageQuota'"),
            ([], "Request body"),
            ("10", "Request body"),
            (None, "Request body"),
        ],
    )
    def test_bad_body_is_400_naming_the_problem(
        self, client: TestClient, unchanged: Any, body: Any, reason: str
    ) -> None:
        client.put(f"{GROUPS}/rg", json={"publishRateInMsgs": 5})
        with unchanged():
            response = client.put(f"{GROUPS}/rg", json=body)
            new = client.put(f"{GROUPS}/other", json=body)
        assert response.status_code == 400, response.text
        assert reason in response.json()["reason"]
        assert new.status_code == 400

    @pytest.mark.parametrize(
        "raw",
        [b"", b"{", b'{"publishRateInMsgs": 1', b"not json", b"\xff\xfe", b"[1, 2"],
    )
    def test_empty_truncated_or_non_json_body_is_400(
        self, client: TestClient, unchanged: Any, raw: bytes
    ) -> None:
        with unchanged():
            response = client.put(
                f"{GROUPS}/rg", content=raw, headers={"Content-Type": "application/json"}
            )
        assert response.status_code == 400
        assert "body" in response.json()["reason"].lower()

    @pytest.mark.parametrize("name", ["a b", "é", "x" * 256, "a%2Fb", "tab%09", "%20"])
    def test_bad_name_is_400(self, client: TestClient, unchanged: Any, name: str) -> None:
        with unchanged():
            response = client.put(f"{GROUPS}/{name}", json={})
        assert response.status_code in (400, 404)
        if response.status_code == 400:
            assert "ResourceGroup name" in response.json()["reason"]

    def test_longest_and_punctuated_names_are_accepted(self, client: TestClient) -> None:
        for name in ("x" * 255, "a_b-c=d:e.f"):
            assert client.put(f"{GROUPS}/{name}", json={}).status_code == 204
            assert client.get(f"{GROUPS}/{name}").status_code == 200


class TestGetAndList:
    def test_list_is_sorted_names(self, client: TestClient) -> None:
        assert client.get(GROUPS).json() == []
        for name in ("b", "a", "c"):
            client.put(f"{GROUPS}/{name}", json={})
        assert client.get(GROUPS).json() == ["a", "b", "c"]

    def test_missing_group_is_404(self, client: TestClient) -> None:
        response = client.get(f"{GROUPS}/nope")
        assert response.status_code == 404
        assert response.json() == {"reason": "ResourceGroup does not exist"}


class TestDelete:
    def test_delete(self, client: TestClient) -> None:
        client.put(f"{GROUPS}/rg", json={})
        assert client.delete(f"{GROUPS}/rg").status_code == 204
        assert client.get(f"{GROUPS}/rg").status_code == 404

    def test_missing_is_404(self, client: TestClient) -> None:
        assert client.delete(f"{GROUPS}/nope").status_code == 404

    def test_in_use_by_namespace_is_412(self, client: TestClient, unchanged: Any) -> None:
        make_tenant_with_group(client, "rg")
        with unchanged():
            response = client.delete(f"{GROUPS}/rg")
        assert response.status_code == 412
        assert response.json() == {"reason": "ResourceGroup is in use"}

    def test_in_use_by_tenant_is_412(self, client: TestClient) -> None:
        client.put(f"{GROUPS}/rg", json={})
        client.put("/admin/v2/tenants/t", json={})
        client.post("/admin/v2/tenants/t/resourcegroup/rg")
        assert client.delete(f"{GROUPS}/rg").status_code == 412
        client.delete("/admin/v2/tenants/t/resourcegroup")
        assert client.delete(f"{GROUPS}/rg").status_code == 204


class TestRoles:
    @pytest.mark.parametrize("role", ["tenant-admin", "job", "stranger"])
    def test_only_superusers_write_and_list(
        self, client: TestClient, auth: Auth, unchanged: Any, role: str
    ) -> None:
        make_tenant_with_group(client, "rg")
        headers = auth(role)
        with unchanged():
            assert client.get(GROUPS, headers=headers).status_code == 403
            assert client.put(f"{GROUPS}/rg", json={}, headers=headers).status_code == 403
            assert client.put(f"{GROUPS}/new", json={}, headers=headers).status_code == 403
            assert client.delete(f"{GROUPS}/rg", headers=headers).status_code == 403

    def test_tenant_admin_reads_only_groups_attached_to_its_tenant(
        self, client: TestClient, auth: Auth
    ) -> None:
        make_tenant_with_group(client, "rg")
        client.put(f"{GROUPS}/elsewhere", json={})
        admin = auth("tenant-admin")
        assert client.get(f"{GROUPS}/rg", headers=admin).json()["publishRateInMsgs"] == 10
        assert client.get(f"{GROUPS}/elsewhere", headers=admin).status_code == 403

    def test_tenant_level_attachment_also_grants_read(self, client: TestClient, auth: Auth) -> None:
        client.put(f"{GROUPS}/rg", json={})
        client.put("/admin/v2/tenants/t2", json={"adminRoles": ["other-admin"]})
        client.post("/admin/v2/tenants/t2/resourcegroup/rg")
        assert client.get(f"{GROUPS}/rg", headers=auth("other-admin")).status_code == 200

    @pytest.mark.parametrize("role", ["job", "stranger"])
    def test_clients_and_strangers_cannot_read(
        self, client: TestClient, auth: Auth, role: str
    ) -> None:
        make_tenant_with_group(client, "rg")
        assert client.get(f"{GROUPS}/rg", headers=auth(role)).status_code == 403
