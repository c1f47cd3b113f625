"""``rgadmin top``: the latest usage sample of each group from the server's usage history,
saturated groups first; plain text without a terminal, a live view in one."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.commands.usage_table import latest_sample, plain_table, saturated_first
from app.quota import history
from app.state import state_of
from tests.cli.conftest import Rgadmin, failure, ok
from tests.conftest import SUPERUSER
from tests.factories import FakeClock, create_group, create_namespace, create_tenant

RGADMIN = Path(sys.executable).with_name("rgadmin")
RESOLUTION_S = 10
QUOTA = 1000


def usage_answer(group: str, msgs: dict[str, list[Any]], times: list[float]) -> dict[str, Any]:
    """An answer of ``GET .../usage`` with ``msgs`` as publish msgs and the rest unlimited."""
    unlimited = {
        "limit": [-1] * len(times),
        "usage": [0.0] * len(times),
        "demand": [0.0] * len(times),
        "allocation": [None] * len(times),
    }
    return {
        "resourceGroup": group,
        "resolutionSeconds": RESOLUTION_S,
        "times": times,
        "reporters": [2] * len(times),
        "dimensions": {
            "publishRateInMsgs": msgs,
            "publishRateInBytes": unlimited,
            "dispatchRateInMsgs": unlimited,
            "dispatchRateInBytes": unlimited,
        },
        "namespaces": [],
    }


class TestTable:
    def test_the_latest_sample_is_shown(self) -> None:
        answer = usage_answer(
            "rg",
            {
                "limit": [500, 2000],
                "usage": [499.0, 1500.0],
                "demand": [900.0, None],
                "allocation": [500.0, 2000.0],
            },
            times=[100.0, 110.0],
        )
        sample = latest_sample("rg", answer)
        assert (sample.at, sample.reporters, sample.saturation) == (110.0, 2, 75.0)
        lines = plain_table([sample], now=113.0).splitlines()
        assert lines[0].split() == [
            "GROUP",
            "DIMENSION",
            "LIMIT",
            "USAGE",
            "USED",
            "DEMAND",
            "ALLOCATION",
            "REPORTERS",
            "AGE",
            "MODE",
            "WOULD_HOLD_BACK",
        ]
        assert lines[1].split() == [
            "rg",
            "publishMsgs",
            "2k",
            "1.5k",
            "75%",
            "?",
            "2k",
            "2",
            "3s",
            "-",
            "-",
        ]
        assert lines[2].split() == [
            "rg",
            "publishBytes",
            "unlimited",
            "0B",
            "-",
            "0B",
            "-",
            "2",
            "3s",
            "-",
            "-",
        ]

    def test_usage_is_the_latest_complete_and_age_says_how_old(self) -> None:
        answer = usage_answer(
            "rg",
            {
                "limit": [1000, 1000, 1000],
                "usage": [990.0, None, None],
                "demand": [1500.0, 1500.0, 0.0],
                "allocation": [1000.0, 1000.0, 0.0],
            },
            times=[100.0, 110.0, 120.0],
        )
        sample = latest_sample("rg", answer)
        assert (sample.at, sample.saturation) == (100.0, 99.0)
        row = plain_table([sample], now=125.0).splitlines()[1].split()
        assert row == ["rg", "publishMsgs", "1k", "990", "99%", "0", "0", "2", "25s", "-", "-"]

    def test_no_complete_usage_yet_is_pending(self) -> None:
        msgs = {"limit": [1000], "usage": [None], "demand": [10.0], "allocation": [500.0]}
        sample = latest_sample("rg", usage_answer("rg", msgs, times=[100.0]))
        row = plain_table([sample], now=101.0).splitlines()[1].split()
        assert row == [
            "rg",
            "publishMsgs",
            "1k",
            "-",
            "-",
            "10",
            "500",
            "2",
            "<pending>",
            "-",
            "-",
        ]

    def test_saturated_groups_first_then_unlimited_and_unsampled_by_name(self) -> None:
        def group(name: str, limit: int, usage: float) -> Any:
            msgs = {"limit": [limit], "usage": [usage], "demand": [usage], "allocation": [None]}
            return latest_sample(name, usage_answer(name, msgs, times=[1.0]))

        samples = [
            group("idle", 1000, 10.0),
            group("unlimited", -1, 5000.0),
            latest_sample("fresh", usage_answer("fresh", {}, times=[])),
            group("over", 100, 130.0),
            group("near", 1000, 950.0),
            group("also-unlimited", 0, 1.0),
        ]
        order = [sample.group for sample in saturated_first(samples)]
        assert order == ["over", "near", "idle", "also-unlimited", "fresh", "unlimited"]
        fresh = plain_table([samples[2]], now=0).splitlines()[1].split()
        assert fresh == ["fresh", *["-"] * 7, "<pending>", "-", "-"]


@pytest.fixture
def world(server: str, token: Callable[[str], str]) -> None:
    """Groups ``hot`` and ``cool`` (publish 1000 msgs/s) on ``t/hot`` and ``t/cool``, and
    ``free`` (unlimited) on nothing; ``t`` is administered by ``t-admin``; ``job`` produces.
    Made over plain HTTP: the verbs' own tests drive the CLI."""
    headers = {"Authorization": f"Bearer {token(SUPERUSER)}"}
    with httpx.Client(base_url=server, headers=headers) as admin:
        create_group(admin, "hot", publishRateInMsgs=QUOTA)
        create_group(admin, "cool", publishRateInMsgs=QUOTA)
        create_group(admin, "free")
        create_tenant(admin, "t", ["t-admin"])
        for name in ("hot", "cool"):
            create_namespace(admin, f"t/{name}", group=name, producers=["job"])


def report(client: httpx.Client, clock: FakeClock, reporter: str, ns: str, used: int) -> None:
    body = {
        "sentAtMs": clock.ms(),
        "intervalMs": 1000,
        "namespaces": {ns: {"publishMsgs": {"used": used, "demand": used * 1.5}}},
    }
    response = client.post(f"/quota/v1/reporters/{reporter}/reports", json=body)
    assert response.status_code == 200, response.text


@pytest.fixture
def sampled(
    world: None,
    server: str,
    cli_app: FastAPI,
    server_clock: FakeClock,
    token: Callable[[str], str],
) -> None:
    """Reports every second (``t/hot`` uses 990 msgs/s of 1000, ``t/cool`` 300) from the
    start of a bucket of the history until its usage is complete, then the usage sample the
    server takes every 10 s, and the counts its upkeep writes every second, taken now."""
    headers = {"Authorization": f"Bearer {token('job')}"}
    state = state_of(cli_app)
    start = server_clock.now - server_clock.now % RESOLUTION_S + RESOLUTION_S
    server_clock.now = start
    with httpx.Client(base_url=server, headers=headers) as job:
        while server_clock.now < start + RESOLUTION_S + history.complete_after_s(state.settings):
            server_clock.now += 1
            report(job, server_clock, "a", "t/hot", 990)
            report(job, server_clock, "b", "t/cool", 300)
            if server_clock.now % RESOLUTION_S == 0:  # unless the server's sampler took it
                take_sample(cli_app, server_clock)
    with state.sessions.begin() as session:
        history.write_counts(session, state.usage_counter.complete(server_clock.now), state.writer)
    # The server's upkeep may have taken the counts first: wait until they are written.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with state.sessions() as session:
            found = history.read(session, "hot", 60, server_clock.now, state.settings)
        if any(used is not None for used in found.dimensions.publishRateInMsgs.usage):
            return
        time.sleep(0.05)
    pytest.fail("the usage counted was not written")


def take_sample(app: FastAPI, clock: FakeClock) -> bool:
    """Take the usage sample of the clock's moment, as the server does every 10 s."""
    with state_of(app).sessions.begin() as session:
        return history.sample(session, clock.now, state_of(app).settings)


@pytest.mark.usefixtures("sampled")
class TestOnce:
    def test_plain_table_saturated_first(self, rgadmin: Rgadmin) -> None:
        printed = ok(rgadmin("top", "--once"))
        assert "\x1b" not in printed
        lines = printed.splitlines()
        assert lines[0].split()[:2] == ["GROUP", "DIMENSION"]
        assert [line.split()[0] for line in lines[1:]] == ["hot"] * 4 + ["cool"] * 4 + ["free"] * 4
        # The sample is stamped by the server's (test) clock, ahead of this one: AGE is 0s.
        assert lines[1].split() == [
            "hot",
            "publishMsgs",
            "1k",
            "990",
            "99%",
            "1.49k",
            "1k",
            "1",
            "0s",
            "enforce",
            "-",
        ]
        assert lines[2].split() == [
            "hot",
            "publishBytes",
            "unlimited",
            "0B",
            "-",
            "0B",
            "-",
            "1",
            "0s",
            "enforce",
            "-",
        ]
        assert lines[5].split()[:5] == ["cool", "publishMsgs", "1k", "300", "30%"]
        assert lines[9].split() == [
            "free",
            "publishMsgs",
            "unlimited",
            "0",
            "-",
            "0",
            "-",
            "0",
            "0s",
            "enforce",
            "-",
        ]

    def test_named_groups_as_a_tenant_admin(self, rgadmin: Rgadmin) -> None:
        printed = ok(rgadmin("top", "--once", "cool", "hot", role="t-admin"))
        assert [line.split()[0] for line in printed.splitlines()[1::4]] == ["hot", "cool"]

    def test_a_tenant_admin_cannot_list_every_group(self, rgadmin: Rgadmin) -> None:
        message = failure(rgadmin("top", "--once", role="t-admin"))
        assert message.startswith("Listing all ResourceGroups needs a superuser token (")
        assert message.endswith("name the groups to watch: rgadmin top RESOURCE_GROUP...")

    def test_a_named_group_that_is_missing(self, rgadmin: Rgadmin) -> None:
        assert failure(rgadmin("top", "--once", "hot", "nope")) == (
            "nope: ResourceGroup does not exist (HTTP 404)"
        )

    def test_a_group_the_tenant_does_not_use(self, rgadmin: Rgadmin) -> None:
        assert failure(rgadmin("top", "--once", "free", role="t-admin")).endswith("(HTTP 403)")


def test_no_groups(rgadmin: Rgadmin) -> None:
    result = rgadmin("top", "--once")
    assert ok(result) == ""
    assert result.stderr == "No ResourceGroups.\n"


def test_a_group_not_sampled_yet(
    rgadmin: Rgadmin, cli_app: FastAPI, server_clock: FakeClock
) -> None:
    # The server's own sampler could take this moment, with the group in it, at any time:
    # take it first, before the group exists.
    take_sample(cli_app, server_clock)
    ok(rgadmin("resourcegroups", "create", "new"))
    assert ok(rgadmin("top", "--once")).splitlines()[1].split() == [
        "new",
        *["-"] * 7,
        "<pending>",
        "enforce",
        "-",
    ]


def environment(server: str, token: str) -> dict[str, str]:
    return os.environ | {"RG_ADMIN_URL": server, "RG_ADMIN_TOKEN": token, "TERM": "xterm"}


def read_until(fd: int, done: Callable[[bytes], bool], timeout_s: float = 20) -> bytes:
    """What ``fd`` gives until ``done`` holds for it all (or the deadline)."""
    output = b""
    deadline = time.monotonic() + timeout_s
    while not done(output) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            output += chunk
    return output


@pytest.mark.usefixtures("sampled")
class TestRefreshing:
    def test_live_view_in_a_terminal_until_ctrl_c(
        self, server: str, token: Callable[[str], str]
    ) -> None:
        controller, terminal = pty.openpty()
        process = subprocess.Popen(
            [str(RGADMIN), "top", "--interval", "0.1"],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=environment(server, token(SUPERUSER)),
        )
        os.close(terminal)
        try:
            # The view says when it refreshed; wait for a few redraws of the table.
            output = read_until(controller, lambda seen: seen.count(b"GROUP") >= 3)
            process.send_signal(signal.SIGINT)
            output += read_until(controller, lambda seen: False, timeout_s=1)
            assert process.wait(timeout=10) == 0
        finally:
            process.kill()
            os.close(controller)
        assert output.count(b"GROUP") >= 3, output
        assert b"\x1b[" in output  # drawn in place with the terminal's control codes
        assert b"hot" in output and b"99%" in output
        assert b"Traceback" not in output

    def test_without_a_terminal_a_plain_snapshot_every_interval(
        self, server: str, token: Callable[[str], str]
    ) -> None:
        process = subprocess.Popen(
            [str(RGADMIN), "top", "--interval", "0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(server, token(SUPERUSER)),
        )
        assert process.stdout is not None
        try:
            output = read_until(process.stdout.fileno(), lambda seen: seen.count(b"GROUP") >= 2)
            process.send_signal(signal.SIGINT)
            _, errors = process.communicate(timeout=10)
        finally:
            process.kill()
        assert process.returncode == 0, errors
        assert output.count(b"GROUP") >= 2 and b"\x1b" not in output
        assert output.splitlines()[1].split()[0] == b"hot"
