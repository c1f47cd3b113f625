"""Attaching ResourceGroups to namespaces and tenants, who may, and the effective group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.errors import NotFound
from app.services.attachments import applied_group
from app.state import state_of
from tests.factories import create_group, create_namespace, create_tenant, reason

NAMESPACE = "/admin/v2/namespaces/t/ns"
TENANT = "/admin/v2/tenants/t"

Auth = Callable[[str], dict[str, str]]

# (attachment path of an existing holder, of a missing one, the 404 reason)
LEVELS = {
    "namespace": (NAMESPACE, "/admin/v2/namespaces/t/nope", "Namespace does not exist"),
    "namespace-of-missing-tenant": (
        NAMESPACE,
        "/admin/v2/namespaces/nope/ns",
        "Namespace does not exist",
    ),
    "tenant": (TENANT, "/admin/v2/tenants/nope", "Tenant does not exist"),
}


@pytest.fixture
def world(client: TestClient) -> None:
    """Groups ``rg1`` and ``rg2``; tenants ``t`` (admin ``tenant-admin``) and ``other`` (admin
    ``other-admin``), each with a namespace ``ns`` that role ``job`` may produce to."""
    create_group(client, "rg1")
    create_group(client, "rg2")
    for tenant, admin in (("t", "tenant-admin"), ("other", "other-admin")):
        create_tenant(client, tenant, [admin])
        create_namespace(client, f"{tenant}/ns", producers=["job"])


def attached(client: TestClient, base: str, headers: dict[str, str] | None = None) -> Any:
    response = client.get(f"{base}/resourcegroup", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.usefixtures("world")
@pytest.mark.parametrize("level", LEVELS)
class TestAttachment:
    def test_attach_get_reattach_detach(self, client: TestClient, level: str) -> None:
        base, _, _ = LEVELS[level]
        assert attached(client, base) is None
        assert client.post(f"{base}/resourcegroup/rg1").status_code == 204
        assert attached(client, base) == "rg1"
        assert client.post(f"{base}/resourcegroup/rg2").status_code == 204
        assert attached(client, base) == "rg2"
        assert client.delete(f"{base}/resourcegroup").status_code == 204
        assert attached(client, base) is None
        # Detaching what is not attached is not an error.
        assert client.delete(f"{base}/resourcegroup").status_code == 204

    def test_attachment_keeps_the_group_in_use(self, client: TestClient, level: str) -> None:
        base, _, _ = LEVELS[level]
        client.post(f"{base}/resourcegroup/rg1")
        assert client.delete("/admin/v2/resourcegroups/rg1").status_code == 412
        client.delete(f"{base}/resourcegroup")
        assert client.delete("/admin/v2/resourcegroups/rg1").status_code == 204

    def test_missing_group_is_412_and_changes_nothing(
        self, client: TestClient, unchanged: Any, level: str
    ) -> None:
        base, _, _ = LEVELS[level]
        client.post(f"{base}/resourcegroup/rg1")
        with unchanged():
            response = client.post(f"{base}/resourcegroup/nope")
        assert reason(response, 412) == "ResourceGroup does not exist"
        assert attached(client, base) == "rg1"

    def test_missing_holder_is_404(self, client: TestClient, unchanged: Any, level: str) -> None:
        _, missing, expected = LEVELS[level]
        with unchanged():
            responses = [
                client.post(f"{missing}/resourcegroup/rg1"),
                client.get(f"{missing}/resourcegroup"),
                client.delete(f"{missing}/resourcegroup"),
            ]
        for response in responses:
            assert reason(response, 404) == expected

    @pytest.mark.parametrize("group", ["a b", "é", "x" * 256])
    def test_bad_group_name_is_400(
        self, client: TestClient, unchanged: Any, level: str, group: str
    ) -> None:
        base, _, _ = LEVELS[level]
        with unchanged():
            response = client.post(f"{base}/resourcegroup/{group}")
        assert "Invalid ResourceGroup name" in reason(response, 400)


@pytest.mark.usefixtures("world")
class TestRoles:
    def test_tenant_admin_manages_its_namespaces_groups(
        self, client: TestClient, auth: Auth
    ) -> None:
        client.post(f"{TENANT}/resourcegroup/rg1")
        admin = auth("tenant-admin")
        assert client.post(f"{NAMESPACE}/resourcegroup/rg1", headers=admin).status_code == 204
        assert attached(client, NAMESPACE, admin) == "rg1"
        assert client.delete(f"{NAMESPACE}/resourcegroup", headers=admin).status_code == 204
        assert attached(client, NAMESPACE, admin) is None

    @pytest.mark.parametrize("group", ["rg2", "missing"])
    def test_tenant_admin_cannot_pick_a_group_its_tenant_does_not_use(
        self, client: TestClient, auth: Auth, unchanged: Any, group: str
    ) -> None:
        # Otherwise a tenant admin could move a namespace to an unlimited group.
        client.post(f"{TENANT}/resourcegroup/rg1")
        with unchanged():
            response = client.post(
                f"{NAMESPACE}/resourcegroup/{group}", headers=auth("tenant-admin")
            )
        assert "already uses" in reason(response, 403)

    def test_tenant_admin_reads_but_cannot_change_its_tenants_group(
        self, client: TestClient, auth: Auth, unchanged: Any
    ) -> None:
        client.post(f"{TENANT}/resourcegroup/rg1")
        admin = auth("tenant-admin")
        assert attached(client, TENANT, admin) == "rg1"
        with unchanged():
            responses = [
                client.post(f"{TENANT}/resourcegroup/rg2", headers=admin),
                client.delete(f"{TENANT}/resourcegroup", headers=admin),
            ]
        for response in responses:
            assert reason(response, 403) == "Only superusers may do this"

    @pytest.mark.parametrize(
        "base", ["/admin/v2/namespaces/other/ns", "/admin/v2/tenants/other"], ids=["ns", "tenant"]
    )
    def test_tenant_admin_is_403_on_another_tenant(
        self, client: TestClient, auth: Auth, unchanged: Any, base: str
    ) -> None:
        client.post(f"{base}/resourcegroup/rg1")
        admin = auth("tenant-admin")
        with unchanged():
            responses = [
                client.get(f"{base}/resourcegroup", headers=admin),
                client.post(f"{base}/resourcegroup/rg2", headers=admin),
                client.delete(f"{base}/resourcegroup", headers=admin),
            ]
        for response in responses:
            assert reason(response, 403)

    @pytest.mark.parametrize("role", ["job", "stranger"])
    @pytest.mark.parametrize("base", [NAMESPACE, TENANT], ids=["ns", "tenant"])
    def test_clients_and_strangers_are_403(
        self, client: TestClient, auth: Auth, unchanged: Any, base: str, role: str
    ) -> None:
        client.post(f"{base}/resourcegroup/rg1")
        headers = auth(role)
        with unchanged():
            responses = [
                client.get(f"{base}/resourcegroup", headers=headers),
                client.post(f"{base}/resourcegroup/rg2", headers=headers),
                client.delete(f"{base}/resourcegroup", headers=headers),
            ]
        for response in responses:
            assert reason(response, 403)


@pytest.mark.usefixtures("world")
class TestEffectiveGroup:
    @staticmethod
    def effective(app: FastAPI, tenant: str = "t", namespace: str = "ns") -> str | None:
        with state_of(app).sessions() as session:
            return applied_group(session, tenant, namespace).resourceGroup

    def test_namespace_wins_over_tenant_which_wins_over_none(
        self, client: TestClient, app: FastAPI
    ) -> None:
        assert self.effective(app) is None
        client.post(f"{TENANT}/resourcegroup/rg1")
        assert self.effective(app) == "rg1"
        client.post(f"{NAMESPACE}/resourcegroup/rg2")
        assert self.effective(app) == "rg2"
        client.delete(f"{TENANT}/resourcegroup")
        assert self.effective(app) == "rg2"
        client.delete(f"{NAMESPACE}/resourcegroup")
        assert self.effective(app) is None

    def test_detaching_the_namespace_falls_back_to_the_tenant(
        self, client: TestClient, app: FastAPI
    ) -> None:
        client.post(f"{NAMESPACE}/resourcegroup/rg2")
        client.post(f"{TENANT}/resourcegroup/rg1")
        client.delete(f"{NAMESPACE}/resourcegroup")
        assert self.effective(app) == "rg1"
        assert self.effective(app, "other", "ns") is None

    @pytest.mark.parametrize(("tenant", "namespace"), [("t", "nope"), ("nope", "ns")])
    def test_missing_namespace_is_not_found(
        self, app: FastAPI, tenant: str, namespace: str
    ) -> None:
        with pytest.raises(NotFound) as raised:
            self.effective(app, tenant, namespace)
        assert raised.value.reason == "Namespace does not exist"
