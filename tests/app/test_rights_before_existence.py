"""A role without rights on a tenant or namespace gets the same 403 whether it exists or not:
it cannot tell which tenants and namespaces exist. Those with rights still get their 404s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import SUPERUSER
from tests.factories import create_group, create_namespace, create_tenant

Auth = Callable[[str], dict[str, str]]

# (method, path, JSON body); {t} and {ns} are the tenant and namespace asked about.
OPERATIONS: list[tuple[str, str, Any]] = [
    ("GET", "/admin/v2/tenants/{t}", None),
    ("GET", "/admin/v2/tenants/{t}/resourcegroup", None),
    ("PUT", "/admin/v2/tenants/{t}", {"adminRoles": ["x"]}),
    ("POST", "/admin/v2/tenants/{t}", {"adminRoles": ["x"]}),
    ("DELETE", "/admin/v2/tenants/{t}", None),
    ("POST", "/admin/v2/tenants/{t}/resourcegroup/rg", None),
    ("DELETE", "/admin/v2/tenants/{t}/resourcegroup", None),
    ("GET", "/admin/v2/namespaces/{t}", None),
    ("GET", "/admin/v2/namespaces/{t}/{ns}", None),
    ("PUT", "/admin/v2/namespaces/{t}/{ns}", None),
    ("DELETE", "/admin/v2/namespaces/{t}/{ns}", None),
    ("GET", "/admin/v2/namespaces/{t}/{ns}/permissions", None),
    ("POST", "/admin/v2/namespaces/{t}/{ns}/permissions/someone", ["produce"]),
    ("DELETE", "/admin/v2/namespaces/{t}/{ns}/permissions/someone", None),
    ("GET", "/admin/v2/namespaces/{t}/{ns}/resourcegroup", None),
    ("GET", "/admin/v2/namespaces/{t}/{ns}/resourcegroup?applied=true", None),
    ("POST", "/admin/v2/namespaces/{t}/{ns}/resourcegroup/rg", None),
    ("PUT", "/admin/v2/namespaces/{t}/{ns}/resourcegroup/rg", None),
    ("DELETE", "/admin/v2/namespaces/{t}/{ns}/resourcegroup", None),
    ("GET", "/quota/v1/namespaces/{t}/{ns}/policy", None),
    ("POST", "/quota/v1/reporters/probe/reports", "report"),
]

# Each role, with a namespace that exists and on which it has no rights.
WITHOUT_RIGHTS = {
    "stranger": ("t", "ns"),
    "other-admin": ("t", "ns"),  # admin of another tenant
    "job": ("t", "ns2"),  # granted produce on t/ns only
}
MISSING = [("t", "missing"), ("missing", "ns"), ("missing", "missing")]


@pytest.fixture
def world(client: TestClient) -> None:
    create_group(client, "rg", publishRateInMsgs=10)
    create_tenant(client, "t", ["tenant-admin"])
    create_tenant(client, "other", ["other-admin"])
    create_namespace(client, "t/ns", producers=["job"])
    create_namespace(client, "t/ns2")
    create_namespace(client, "other/ns")


def call(
    client: TestClient, headers: dict[str, str], operation: tuple[str, str, Any], target: Any
) -> tuple[int, str]:
    """The status and reason, with the names asked about replaced, so that answers about
    different tenants and namespaces compare equal when they say the same."""
    method, template, body = operation
    tenant, namespace = target
    if body == "report":
        body = {
            "sentAtMs": round(time.time() * 1000),
            "intervalMs": 1000,
            "namespaces": {f"{tenant}/{namespace}": {}},
        }
    path = template.format(t=tenant, ns=namespace)
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    response = client.request(method, path, headers=headers, **kwargs)
    text = response.json().get("reason", "") if response.status_code >= 400 else ""
    text = text.replace(f"{tenant}/{namespace}", "<TENANT>/<NAMESPACE>")
    text = text.replace(f"tenant {tenant}", "tenant <TENANT>")
    return response.status_code, text


@pytest.mark.usefixtures("world")
class TestWithoutRights:
    @pytest.mark.parametrize("role", sorted(WITHOUT_RIGHTS))
    def test_missing_and_existing_answer_the_same_403(
        self, client: TestClient, auth: Auth, unchanged: Any, role: str
    ) -> None:
        headers = auth(role)
        with unchanged():
            for operation in OPERATIONS:
                existing = call(client, headers, operation, WITHOUT_RIGHTS[role])
                assert existing[0] == 403, (role, operation, existing)
                for target in MISSING:
                    assert call(client, headers, operation, target) == existing, (
                        role,
                        operation,
                        target,
                    )


@pytest.mark.usefixtures("world")
class TestWithRights:
    def test_a_tenant_admin_learns_its_namespaces_are_missing(
        self, client: TestClient, auth: Auth
    ) -> None:
        headers = auth("tenant-admin")
        for operation in OPERATIONS:
            method, template, _ = operation
            if template.startswith("/admin/v2/namespaces/{t}/{ns}") and method == "GET":
                assert call(client, headers, operation, ("t", "missing"))[0] == 404, operation
        # ...but not whether other tenants exist.
        assert call(client, headers, OPERATIONS[0], ("missing", "ns"))[0] == 403

    def test_a_client_learns_nothing_beyond_its_namespace(
        self, client: TestClient, auth: Auth
    ) -> None:
        policy = ("GET", "/quota/v1/namespaces/{t}/{ns}/policy", None)
        assert call(client, auth("job"), policy, ("t", "ns"))[0] == 200
        assert call(client, auth("job"), policy, ("t", "missing"))[0] == 403

    @pytest.mark.parametrize("target", MISSING)
    def test_superusers_get_404(
        self, client: TestClient, auth: Auth, target: tuple[str, str]
    ) -> None:
        for operation in OPERATIONS:
            method, template, _ = operation
            if method == "GET" and "{ns}" in template:
                assert call(client, auth(SUPERUSER), operation, target)[0] == 404, operation


class TestSuperusersRoutes:
    """Rights before anything else: a role that is not a superuser learns nothing from a
    superusers' route, not even that the names or the body it sent were wrong."""

    @pytest.mark.parametrize(
        ("method", "path", "body"),
        [
            ("DELETE", "/admin/v2/tenants/b@d", None),
            ("PUT", "/admin/v2/resourcegroups/b@d", {}),
            ("PUT", "/admin/v2/resourcegroups/rg", None),
        ],
    )
    def test_other_roles_get_403_where_a_superuser_gets_400(
        self, client: TestClient, auth: Auth, method: str, path: str, body: Any
    ) -> None:
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        superuser = client.request(method, path, headers=auth(SUPERUSER), **kwargs)
        other = client.request(method, path, headers=auth("job"), **kwargs)
        assert superuser.status_code == 400, superuser.text
        assert (other.status_code, other.json()) == (403, {"reason": "Only superusers may do this"})
