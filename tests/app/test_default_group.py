"""The default ResourceGroup (superusers), the effective group with it, ``?applied=true``, and
reports of namespaces under it, on both databases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app import generation as admin_generation
from app.quota.store import effective_groups
from app.state import state_of
from tests.app.test_quota_reports import INTERVAL_S, allocated, body, report
from tests.factories import FakeClock, create_group, create_namespace, create_tenant, reason

Auth = Callable[[str], dict[str, str]]

DEFAULT = "/admin/v2/default-resourcegroup"
NAMESPACE = "/admin/v2/namespaces/t/ns"
TENANT = "/admin/v2/tenants/t"
QUOTA = 1000


@pytest.fixture
def world(client: TestClient) -> None:
    """Groups ``dflt`` (publish 1000 msgs/s), ``rg1`` and ``rg2``; tenants ``t`` (admin
    ``tenant-admin``) and ``other`` (admin ``other-admin``), each with a namespace ``ns``
    that role ``job`` may produce to. No default group yet."""
    create_group(client, "dflt", publishRateInMsgs=QUOTA)
    create_group(client, "rg1")
    create_group(client, "rg2")
    for tenant, admin in (("t", "tenant-admin"), ("other", "other-admin")):
        create_tenant(client, tenant, [admin])
        create_namespace(client, f"{tenant}/ns", producers=["job"])


def default_of(client: TestClient) -> Any:
    response = client.get(DEFAULT)
    assert response.status_code == 200, response.text
    return response.json()


def applied(client: TestClient, base: str = NAMESPACE, headers: Any = None) -> Any:
    response = client.get(f"{base}/resourcegroup", params={"applied": "true"}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.usefixtures("world")
class TestDefaultGroup:
    def test_set_get_replace_remove(self, client: TestClient) -> None:
        assert default_of(client) is None
        assert client.post(f"{DEFAULT}/dflt").status_code == 204
        assert default_of(client) == "dflt"
        assert client.post(f"{DEFAULT}/rg1").status_code == 204
        assert default_of(client) == "rg1"
        assert client.delete(DEFAULT).status_code == 204
        assert default_of(client) is None
        # Removing what is not there is not an error.
        assert client.delete(DEFAULT).status_code == 204

    def test_missing_group_is_412_and_changes_nothing(
        self, client: TestClient, unchanged: Any
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        with unchanged():
            response = client.post(f"{DEFAULT}/nope")
        assert reason(response, 412) == "ResourceGroup does not exist"
        assert default_of(client) == "dflt"

    @pytest.mark.parametrize("group", ["a b", "é", "x" * 256])
    def test_bad_group_name_is_400(self, client: TestClient, unchanged: Any, group: str) -> None:
        with unchanged():
            response = client.post(f"{DEFAULT}/{group}")
        assert "Invalid ResourceGroup name" in reason(response, 400)

    def test_the_default_is_in_use(self, client: TestClient, unchanged: Any) -> None:
        client.post(f"{DEFAULT}/dflt")
        with unchanged():
            response = client.delete("/admin/v2/resourcegroups/dflt")
        assert reason(response, 412) == "ResourceGroup is in use"
        client.delete(DEFAULT)
        assert client.delete("/admin/v2/resourcegroups/dflt").status_code == 204

    @pytest.mark.parametrize(
        ("method", "path"), [("GET", DEFAULT), ("POST", f"{DEFAULT}/rg1"), ("DELETE", DEFAULT)]
    )
    def test_without_a_token_is_401(
        self, client: TestClient, anonymous: TestClient, unchanged: Any, method: str, path: str
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        with unchanged():
            response = anonymous.request(method, path)
        assert reason(response, 401).startswith("Authentication required")
        assert "WWW-Authenticate" in response.headers

    @pytest.mark.parametrize("role", ["tenant-admin", "job", "stranger"])
    @pytest.mark.parametrize(
        ("method", "path"), [("GET", DEFAULT), ("POST", f"{DEFAULT}/rg1"), ("DELETE", DEFAULT)]
    )
    def test_only_superusers(
        self,
        client: TestClient,
        auth: Auth,
        unchanged: Any,
        method: str,
        path: str,
        role: str,
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        with unchanged():
            response = client.request(method, path, headers=auth(role))
        assert reason(response, 403) == "Only superusers may do this"

    def test_writes_change_the_admin_generation(self, client: TestClient, engine: Engine) -> None:
        # Server processes keep namespaces' effective groups while the generation holds.
        def generation() -> int:
            with engine.connect() as connection:
                return admin_generation.current(connection)

        for method, path in (("POST", f"{DEFAULT}/dflt"), ("POST", f"{DEFAULT}/rg1")):
            before = generation()
            assert client.request(method, path).status_code == 204
            assert generation() not in (before, None)
        before = generation()
        assert client.delete(DEFAULT).status_code == 204
        assert generation() not in (before, None)

    def test_tenant_admins_read_it_while_a_namespace_of_theirs_is_under_it(
        self, client: TestClient, auth: Auth
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        admin = auth("tenant-admin")
        assert client.get("/admin/v2/resourcegroups/dflt", headers=admin).status_code == 200
        client.post(f"{TENANT}/resourcegroup/rg1")
        response = client.get("/admin/v2/resourcegroups/dflt", headers=admin)
        assert response.status_code == 403


@pytest.mark.usefixtures("world")
class TestAppliedGroup:
    @staticmethod
    def effective(app: FastAPI, tenant: str = "t", namespace: str = "ns") -> str | None:
        with state_of(app).sessions() as session:
            return effective_groups(session, [(tenant, namespace)])[tenant, namespace].group

    def test_each_source_in_turn(self, client: TestClient, app: FastAPI) -> None:
        assert applied(client) == {"resourceGroup": None, "source": None}
        client.post(f"{DEFAULT}/dflt")
        assert applied(client) == {"resourceGroup": "dflt", "source": "default"}
        assert self.effective(app) == "dflt"
        client.post(f"{TENANT}/resourcegroup/rg1")
        assert applied(client) == {"resourceGroup": "rg1", "source": "tenant"}
        assert self.effective(app) == "rg1"
        client.post(f"{NAMESPACE}/resourcegroup/rg2")
        assert applied(client) == {"resourceGroup": "rg2", "source": "namespace"}
        assert self.effective(app) == "rg2"
        client.delete(f"{TENANT}/resourcegroup")
        client.delete(f"{NAMESPACE}/resourcegroup")
        assert applied(client) == {"resourceGroup": "dflt", "source": "default"}
        client.delete(DEFAULT)
        assert applied(client) == {"resourceGroup": None, "source": None}
        assert self.effective(app) is None

    @pytest.mark.parametrize("flag", [None, "false", "0"])
    def test_without_applied_the_namespaces_own_attachment(
        self, client: TestClient, flag: str | None
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        client.post(f"{TENANT}/resourcegroup/rg1")
        params = {} if flag is None else {"applied": flag}
        response = client.get(f"{NAMESPACE}/resourcegroup", params=params)
        assert response.status_code == 200
        assert response.json() is None
        client.post(f"{NAMESPACE}/resourcegroup/rg2")
        assert client.get(f"{NAMESPACE}/resourcegroup", params=params).json() == "rg2"

    def test_a_new_namespace_falls_under_the_default(self, client: TestClient) -> None:
        client.post(f"{DEFAULT}/dflt")
        assert client.put("/admin/v2/namespaces/t/new").status_code == 204
        assert applied(client, "/admin/v2/namespaces/t/new") == {
            "resourceGroup": "dflt",
            "source": "default",
        }

    @pytest.mark.parametrize("path", ["/admin/v2/namespaces/t/nope", "/admin/v2/namespaces/x/ns"])
    def test_missing_namespace_is_404(self, client: TestClient, path: str) -> None:
        response = client.get(f"{path}/resourcegroup", params={"applied": "true"})
        assert reason(response, 404) == "Namespace does not exist"

    def test_bad_flag_is_400(self, client: TestClient) -> None:
        response = client.get(f"{NAMESPACE}/resourcegroup", params={"applied": "maybe"})
        assert "applied" in reason(response, 400)

    def test_as_the_existing_get_tenant_admins_only(
        self, client: TestClient, anonymous: TestClient, auth: Auth
    ) -> None:
        client.post(f"{DEFAULT}/dflt")
        assert applied(client, headers=auth("tenant-admin"))["source"] == "default"
        for role in ("other-admin", "job", "stranger"):
            response = client.get(
                f"{NAMESPACE}/resourcegroup", params={"applied": "true"}, headers=auth(role)
            )
            assert reason(response, 403)
        response = anonymous.get(f"{NAMESPACE}/resourcegroup", params={"applied": "true"})
        assert reason(response, 401)

    def test_documented_as_one_of_two_shapes(self, app: FastAPI) -> None:
        spec = app.openapi()
        operation = spec["paths"]["/admin/v2/namespaces/{tenant}/{namespace}/resourcegroup"]
        get = operation["get"]
        assert [p["name"] for p in get["parameters"] if p["in"] == "query"] == ["applied"]
        shapes = get["responses"]["200"]["content"]["application/json"]["schema"]["anyOf"]
        assert {"$ref": "#/components/schemas/AppliedResourceGroup"} in shapes
        assert {"type": "string"} in shapes
        assert {"type": "null"} in shapes
        schema = spec["components"]["schemas"]["AppliedResourceGroup"]
        assert set(schema["required"]) == {"resourceGroup", "source"}


class TestReportsUnderTheDefault:
    @pytest.fixture(autouse=True)
    def default_set(self, client: TestClient, world: None) -> None:
        """The world, with ``dflt`` the default group."""
        assert client.post(f"{DEFAULT}/dflt").status_code == 204

    def test_allocated_against_the_default_group(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        result = report(servers[0], auth("job"), "r", body(clock, 300, ns="t/ns"))
        namespace = result["namespaces"]["t/ns"]
        assert namespace["resourceGroup"] == "dflt"
        assert namespace["limits"]["publishRateInMsgs"] == QUOTA
        assert 0 < allocated(result, "t/ns") <= QUOTA
        policy = TestClient(servers[1]).get("/quota/v1/namespaces/t/ns/policy", headers=auth("job"))
        assert policy.json()["resourceGroup"] == "dflt"

    def test_namespaces_of_different_tenants_share_the_default(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        rates: dict[str, float] = {}
        for _ in range(6):
            clock.now += INTERVAL_S
            rates["t"] = allocated(
                report(servers[0], job, "a", body(clock, 800, ns="t/ns")), "t/ns"
            )
            rates["other"] = allocated(
                report(servers[1], job, "b", body(clock, 800, ns="other/ns")), "other/ns"
            )
        assert rates["t"] == pytest.approx(QUOTA / 2, rel=0.05)
        assert rates["other"] == pytest.approx(QUOTA / 2, rel=0.05)

    @pytest.mark.parametrize(
        "attach", [f"{NAMESPACE}/resourcegroup/rg1", f"{TENANT}/resourcegroup/rg1"]
    )
    def test_a_namespace_with_a_group_of_its_own_or_its_tenants_is_not_counted(
        self,
        servers: list[FastAPI],
        client: TestClient,
        auth: Auth,
        clock: FakeClock,
        attach: str,
    ) -> None:
        assert client.post(attach).status_code == 204
        job = auth("job")
        rate = 0.0
        for _ in range(6):
            clock.now += INTERVAL_S
            elsewhere = report(servers[0], job, "a", body(clock, 800, ns="t/ns"))
            assert elsewhere["namespaces"]["t/ns"]["resourceGroup"] == "rg1"
            rate = allocated(
                report(servers[1], job, "b", body(clock, 800, ns="other/ns")), "other/ns"
            )
        assert rate == pytest.approx(QUOTA, rel=0.05)

    def test_a_change_of_default_reaches_the_next_report(
        self, servers: list[FastAPI], client: TestClient, auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        for _ in range(3):  # remembered by server 0
            clock.now += INTERVAL_S
            report(servers[0], job, "r", body(clock, 800))
        client.put("/admin/v2/resourcegroups/small", json={"publishRateInMsgs": 50})
        client.post(f"{DEFAULT}/small")
        clock.now += INTERVAL_S
        result = report(servers[0], job, "r", body(clock, 800))
        assert result["namespaces"]["t/ns"]["resourceGroup"] == "small"
        assert allocated(result) <= 50
        client.delete(DEFAULT)
        clock.now += INTERVAL_S
        result = report(servers[0], job, "r", body(clock, 800))
        assert result["namespaces"]["t/ns"]["resourceGroup"] is None
        assert set(result["namespaces"]["t/ns"]["allocations"].values()) == {-1}
