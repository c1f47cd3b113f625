"""``rgadmin resourcegroups get-mode / set-mode`` against a real server, and ``rgadmin top``
showing a group in observe mode."""

from __future__ import annotations

import json

from tests.cli.conftest import Rgadmin, failure, ok


def test_set_mode_switches_and_get_mode_prints_it(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg", "-mp", "1000"))
    assert ok(rgadmin("resourcegroups", "get-mode", "rg")) == "enforce\n"
    assert ok(rgadmin("resourcegroups", "set-mode", "rg", "observe")) == ""
    assert ok(rgadmin("resourcegroups", "get-mode", "rg")) == "observe\n"
    # The group's own object is Pulsar's, without the mode; an update keeps it.
    assert "mode" not in json.loads(ok(rgadmin("resourcegroups", "get", "rg")))
    ok(rgadmin("resourcegroups", "update", "rg", "-mp", "2000"))
    assert ok(rgadmin("resourcegroups", "get-mode", "rg")) == "observe\n"
    ok(rgadmin("resourcegroups", "set-mode", "rg", "ENFORCE"))
    assert ok(rgadmin("resourcegroups", "get-mode", "rg")) == "enforce\n"


def test_a_missing_group_says_so(rgadmin: Rgadmin) -> None:
    assert failure(rgadmin("resourcegroups", "set-mode", "nope", "observe")) == (
        "ResourceGroup does not exist (HTTP 404)"
    )
    assert (
        failure(rgadmin("resourcegroups", "get-mode", "nope"))
        == "ResourceGroup does not exist (HTTP 404)"
    )


def test_an_unknown_mode_is_refused_before_any_call(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "rg"))
    result = rgadmin("resourcegroups", "set-mode", "rg", "watch")
    assert result.exit_code == 2
    assert "watch" in result.stderr
    assert ok(rgadmin("resourcegroups", "get-mode", "rg")) == "enforce\n"


def test_top_shows_the_mode(rgadmin: Rgadmin) -> None:
    ok(rgadmin("resourcegroups", "create", "watched", "-mp", "1000"))
    ok(rgadmin("resourcegroups", "create", "held", "-mp", "1000"))
    ok(rgadmin("resourcegroups", "set-mode", "watched", "observe"))
    lines = ok(rgadmin("top", "--once")).splitlines()
    header = lines[0].split()
    assert header[-2:] == ["MODE", "WOULD_HOLD_BACK"]
    modes = {line.split()[0]: line.split()[-2] for line in lines[1:]}
    assert modes == {"watched": "observe", "held": "enforce"}
