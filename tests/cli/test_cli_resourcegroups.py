"""``rgadmin resourcegroups``: pulsar-admin's verbs against a real server."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Rgadmin, failure, ok

ALL_UNLIMITED = {
    "publishRateInMsgs": -1,
    "publishRateInBytes": -1,
    "dispatchRateInMsgs": -1,
    "dispatchRateInBytes": -1,
    "replicationDispatchRateInMsgs": -1,
    "replicationDispatchRateInBytes": -1,
}


def group(rgadmin: Rgadmin, name: str) -> dict[str, int]:
    found: dict[str, int] = json.loads(ok(rgadmin("resourcegroups", "get", name)))
    return found


def test_create_with_short_flags_omitted_rates_unlimited(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "etl-gold", "-mp", "2000", "-bd", "10485760"))
    assert group(rgadmin, "etl-gold") == ALL_UNLIMITED | {
        "publishRateInMsgs": 2000,
        "dispatchRateInBytes": 10485760,
    }


def test_get_prints_indented_json(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    printed = ok(rgadmin("resourcegroups", "get", "rg"))
    assert printed == json.dumps(ALL_UNLIMITED, indent=2) + "\n"


def test_create_with_long_flags(rgadmin: Rgadmin) -> None:
    ok(
        rgadmin(
            "resourcegroups",
            "create",
            "rg",
            "--msg-publish-rate=1",
            "--byte-publish-rate",
            "2",
            "--msg-dispatch-rate",
            "3",
            "--byte-dispatch-rate",
            "4",
            "--replication-msg-dispatch-rate",
            "5",
            "--replication-byte-dispatch-rate",
            "6",
        )
    )
    assert list(group(rgadmin, "rg").values()) == [1, 2, 3, 4, 5, 6]


def test_create_refuses_an_existing_group_and_keeps_it(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg", "-mp", "100"))
    assert "already exists" in failure(rgadmin("resourcegroups", "create", "rg", "-bp", "5"))
    assert group(rgadmin, "rg") == ALL_UNLIMITED | {"publishRateInMsgs": 100}


def test_update_changes_only_the_rates_given(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg", "-mp", "100", "-bp", "200"))
    ok(rgadmin("resourcegroups", "update", "rg", "-md", "300", "--msg-publish-rate", "-1"))
    assert group(rgadmin, "rg") == ALL_UNLIMITED | {
        "publishRateInBytes": 200,
        "dispatchRateInMsgs": 300,
    }


def test_update_of_a_missing_group_is_404_and_creates_nothing(rgadmin: Rgadmin) -> None:
    message = failure(rgadmin("resourcegroups", "update", "typo", "-mp", "5"))
    assert message == "ResourceGroup does not exist (HTTP 404)"
    assert ok(rgadmin("resourcegroups", "list")) == ""


def test_update_without_rates_says_so(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    assert "Nothing to update" in failure(rgadmin("resourcegroups", "update", "rg"))


def test_list_prints_one_name_a_line(rgadmin: Rgadmin) -> None:
    for name in ("b", "a", "c"):
        ok(rgadmin("resourcegroups", "create", name))
    assert sorted(ok(rgadmin("resourcegroups", "list")).splitlines()) == ["a", "b", "c"]


def test_get_of_a_missing_group_prints_the_servers_reason(rgadmin: Rgadmin) -> None:
    message = failure(rgadmin("resourcegroups", "get", "nope"))
    assert message == "ResourceGroup does not exist (HTTP 404)"


def test_delete(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    assert ok(rgadmin("resourcegroups", "delete", "rg")) == ""
    assert ok(rgadmin("resourcegroups", "list")) == ""
    assert failure(rgadmin("resourcegroups", "delete", "rg")).endswith("(HTTP 404)")


def test_delete_of_a_group_in_use_is_412(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    ok(rgadmin("default-resource-group", "set", "rg"))
    message = failure(rgadmin("resourcegroups", "delete", "rg"))
    assert message == "ResourceGroup is in use (HTTP 412)"
    assert ok(rgadmin("resourcegroups", "list")) == "rg\n"


def test_a_rate_the_server_refuses_prints_its_reason(rgadmin: Rgadmin) -> None:
    message = failure(rgadmin("resourcegroups", "create", "rg", "-mp", "-2"))
    assert message.endswith("(HTTP 400)")
    assert "publishRateInMsgs" in message


def test_a_rate_that_is_not_a_number_is_a_usage_error(rgadmin: Rgadmin) -> None:
    result = rgadmin("resourcegroups", "create", "rg", "-mp", "lots")
    assert result.exit_code == 2
    assert "Invalid value for '--msg-publish-rate'" in result.stderr


def test_names_pulsar_allows_reach_the_server_intact(rgadmin: Rgadmin) -> None:
    names = ["a:b=c.d_e-f", "...", ".x"]
    for name in names:
        ok(rgadmin("resourcegroups", "create", name, "-mp", "7"))
        assert group(rgadmin, name)["publishRateInMsgs"] == 7
    assert sorted(ok(rgadmin("resourcegroups", "list")).splitlines()) == sorted(names)


@pytest.mark.parametrize("name", [".", ".."])
def test_names_that_paths_normalise_are_refused(rgadmin: Rgadmin, name: str) -> None:
    result = rgadmin("resourcegroups", "create", name, "-mp", "7")
    assert result.exit_code == 1
    assert f"Invalid ResourceGroup name '{name}'" in result.stderr
