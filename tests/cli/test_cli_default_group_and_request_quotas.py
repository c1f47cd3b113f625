"""``rgadmin default-resource-group`` and ``rgadmin request-quotas`` against a real server."""

from __future__ import annotations

import json

from tests.cli.conftest import Rgadmin, failure, ok


class TestDefaultResourceGroup:
    def test_get_set_remove(self, rgadmin: Rgadmin) -> None:
        ok(rgadmin("resourcegroups", "create", "rg"))
        assert ok(rgadmin("default-resource-group", "get")) == "null\n"
        ok(rgadmin("default-resource-group", "set", "rg"))
        assert ok(rgadmin("default-resource-group", "get")) == "rg\n"
        ok(rgadmin("default-resource-group", "remove"))
        assert ok(rgadmin("default-resource-group", "get")) == "null\n"

    def test_a_missing_group_is_412(self, rgadmin: Rgadmin) -> None:
        assert failure(rgadmin("default-resource-group", "set", "nope")) == (
            "ResourceGroup does not exist (HTTP 412)"
        )

    def test_superusers_only(self, rgadmin: Rgadmin) -> None:
        assert failure(rgadmin("default-resource-group", "get", role="someone")).endswith(
            "(HTTP 403)"
        )


class TestRequestQuotas:
    def test_set_get_remove(self, rgadmin: Rgadmin) -> None:
        assert json.loads(ok(rgadmin("request-quotas", "get"))) == {"default": None, "roles": {}}
        ok(rgadmin("request-quotas", "set-default", "--requests-per-second", "50"))
        ok(rgadmin("request-quotas", "set", "etl-job", "-rps", "200"))
        assert json.loads(ok(rgadmin("request-quotas", "get"))) == {
            "default": 50,
            "roles": {"etl-job": 200},
        }
        ok(rgadmin("request-quotas", "remove", "etl-job"))
        ok(rgadmin("request-quotas", "remove-default"))
        assert json.loads(ok(rgadmin("request-quotas", "get"))) == {"default": None, "roles": {}}

    def test_the_servers_reasons(self, rgadmin: Rgadmin) -> None:
        assert failure(rgadmin("request-quotas", "set-default", "-rps", "0")).endswith("(HTTP 400)")
        assert failure(rgadmin("request-quotas", "remove", "nobody")).endswith("(HTTP 404)")
        assert failure(rgadmin("request-quotas", "get", role="etl-job")).endswith("(HTTP 403)")
