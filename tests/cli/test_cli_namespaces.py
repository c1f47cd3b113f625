"""``rgadmin namespaces``: pulsar-admin's verbs against a real server: namespaces, their
permissions and their ResourceGroup, as a superuser and as a tenant admin."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Rgadmin, failure, ok


@pytest.fixture
def world(rgadmin: Rgadmin) -> None:
    """Groups ``rg`` and ``other``; tenant ``t`` administered by ``t-admin``."""
    ok(rgadmin("resourcegroups", "create", "rg", "-mp", "100"))
    ok(rgadmin("resourcegroups", "create", "other"))
    ok(rgadmin("tenants", "create", "t", "-r", "t-admin"))


pytestmark = pytest.mark.usefixtures("world")


def test_create_list_delete(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/b"))
    ok(rgadmin("namespaces", "create", "t/a", role="t-admin"))
    assert sorted(ok(rgadmin("namespaces", "list", "t")).splitlines()) == ["t/a", "t/b"]
    ok(rgadmin("namespaces", "delete", "t/a"))
    assert ok(rgadmin("namespaces", "list", "t", role="t-admin")) == "t/b\n"


def test_errors_of_create_list_delete(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    assert failure(rgadmin("namespaces", "create", "t/ns")).endswith("(HTTP 409)")
    assert failure(rgadmin("namespaces", "create", "nope/ns")).endswith("(HTTP 404)")
    assert failure(rgadmin("namespaces", "delete", "t/nope")).endswith("(HTTP 404)")
    assert failure(rgadmin("namespaces", "list", "nope")).endswith("(HTTP 404)")
    # Another tenant's admin is refused whether or not the namespace exists.
    assert failure(rgadmin("namespaces", "list", "t", role="u-admin")).endswith("(HTTP 403)")


@pytest.mark.parametrize("argument", ["t", "t/", "/ns", "t/ns/x"])
def test_a_namespace_not_written_tenant_slash_name_is_a_usage_error(
    rgadmin: Rgadmin, argument: str
) -> None:
    result = rgadmin("namespaces", "create", argument)
    assert result.exit_code == 2
    assert "is not tenant/namespace" in result.stderr


def test_permissions(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    assert json.loads(ok(rgadmin("namespaces", "permissions", "t/ns"))) == {}
    ok(rgadmin("namespaces", "grant-permission", "t/ns", "--role", "job", "--actions", "produce"))
    ok(
        rgadmin(
            "namespaces",
            "grant-permission",
            "t/ns",
            "--role",
            "reader@example.com",
            "--actions",
            "produce,consume",
            role="t-admin",
        )
    )
    assert json.loads(ok(rgadmin("namespaces", "permissions", "t/ns"))) == {
        "job": ["produce"],
        "reader@example.com": ["consume", "produce"],
    }
    ok(rgadmin("namespaces", "revoke-permission", "t/ns", "--role", "job"))
    assert list(json.loads(ok(rgadmin("namespaces", "permissions", "t/ns")))) == [
        "reader@example.com"
    ]
    policies = json.loads(ok(rgadmin("namespaces", "policies", "t/ns")))
    assert policies["auth_policies"]["namespace_auth"] == {
        "reader@example.com": ["consume", "produce"]
    }


def test_an_unknown_action_prints_the_servers_reason(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    result = rgadmin("namespaces", "grant-permission", "t/ns", "--role", "r", "--actions", "fly")
    assert failure(result).endswith("(HTTP 400)")


def test_resource_group_own_and_applied(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    assert ok(rgadmin("namespaces", "get-resource-group", "t/ns")) == "null\n"
    assert json.loads(ok(rgadmin("namespaces", "get-resource-group", "t/ns", "--applied"))) == {
        "resourceGroup": None,
        "source": None,
    }
    ok(rgadmin("tenants", "set-resource-group", "t", "-rgn", "other"))
    ok(rgadmin("namespaces", "set-resource-group", "t/ns", "--resource-group-name", "rg"))
    assert ok(rgadmin("namespaces", "get-resource-group", "t/ns")) == "rg\n"
    applied = ok(rgadmin("namespaces", "get-resource-group", "t/ns", "--applied"))
    assert json.loads(applied) == {"resourceGroup": "rg", "source": "namespace"}
    assert failure(rgadmin("resourcegroups", "delete", "rg")) == (
        "ResourceGroup is in use (HTTP 412)"
    )
    ok(rgadmin("namespaces", "remove-resource-group", "t/ns"))
    applied = ok(rgadmin("namespaces", "get-resource-group", "t/ns", "--applied"))
    assert json.loads(applied) == {"resourceGroup": "other", "source": "tenant"}


def test_resource_group_errors(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    assert failure(rgadmin("namespaces", "set-resource-group", "t/ns", "-rgn", "nope")) == (
        "ResourceGroup does not exist (HTTP 412)"
    )
    assert failure(rgadmin("namespaces", "set-resource-group", "t/x", "-rgn", "rg")).endswith(
        "(HTTP 404)"
    )
    assert failure(rgadmin("namespaces", "get-resource-group", "t/x")).endswith("(HTTP 404)")


def test_a_tenant_admin_never_lifts_a_quota(rgadmin: Rgadmin) -> None:
    ok(rgadmin("namespaces", "create", "t/ns"))
    # A group its tenant does not use: forbidden, with the server's reason.
    message = failure(
        rgadmin("namespaces", "set-resource-group", "t/ns", "-rgn", "rg", role="t-admin")
    )
    assert message.endswith("(HTTP 403)")
    ok(rgadmin("namespaces", "set-resource-group", "t/ns", "-rgn", "rg"))
    message = failure(rgadmin("namespaces", "remove-resource-group", "t/ns", role="t-admin"))
    assert message.endswith("(HTTP 403)")
    assert ok(rgadmin("namespaces", "get-resource-group", "t/ns", role="t-admin")) == "rg\n"
