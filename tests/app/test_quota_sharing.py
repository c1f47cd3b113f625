"""Sharing a group between namespaces through real reports (both databases): namespaces first,
equal-share fallbacks in every answer, and a cap on a role's live reporters per namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.app.test_quota_reports import INTERVAL_S, Auth, body, report
from tests.conftest import make_settings
from tests.factories import (
    FakeClock,
    attach,
    create_group,
    create_namespace,
    create_tenant,
    running_app,
)

QUOTA = 1000
CAP = 5


@pytest.fixture
def server(
    database_url: str, secret_key: bytes, engine: Engine, clock: FakeClock
) -> Iterator[FastAPI]:
    settings = make_settings(database_url, secret_key, max_reporters_per_namespace=CAP)
    with running_app(settings, clock=clock) as app:
        yield app


@pytest.fixture
def shared(client: TestClient) -> None:
    """Group ``rg`` (publish 1000 msgs/s) on the tenant ``t``: both its namespaces use it;
    role ``small`` produces to ``t/small``, role ``big`` to ``t/big``."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_tenant(client, "t")
    attach(client, "t", "rg")
    for ns in ("small", "big"):
        create_namespace(client, f"t/{ns}", producers=[ns])


def rates(result: dict[str, object], ns: str, key: str = "allocations") -> float:
    namespaces = result["namespaces"]
    assert isinstance(namespaces, dict)
    return float(namespaces[ns][key]["publishMsgs"])


@pytest.mark.usefixtures("shared")
class TestNamespacesFirst:
    def test_a_namespace_with_more_processes_gets_no_more(
        self, server: FastAPI, auth: Auth, clock: FakeClock
    ) -> None:
        # One process in t/small against four in t/big (under the cap), all wanting 800.
        reporters = [("small", "s0")] + [("big", f"b{i}") for i in range(4)]
        latest: dict[str, dict[str, object]] = {}
        for _ in range(8):
            clock.now += INTERVAL_S
            for ns, rid in reporters:
                latest[rid] = report(server, auth(ns), rid, body(clock, 800, ns=f"t/{ns}"))
        small = rates(latest["s0"], "t/small")
        big = sum(rates(latest[f"b{i}"], "t/big") for i in range(4))
        assert small == pytest.approx(QUOTA / 2, rel=0.05)
        assert big == pytest.approx(QUOTA / 2, rel=0.05)
        # Fallbacks: fair shares, namespaces first, adding up to the quota.
        assert rates(latest["s0"], "t/small", "fallbackAllocations") == pytest.approx(500, rel=0.05)
        assert rates(latest["b0"], "t/big", "fallbackAllocations") == pytest.approx(125, rel=0.05)

    def test_an_idle_reporter_holds_only_a_trickle(
        self, server: FastAPI, auth: Auth, clock: FakeClock
    ) -> None:
        # Demand 0 is known (idle a whole interval): the busy reporter gets what it wants.
        busy = idle = {}
        for _ in range(6):
            clock.now += INTERVAL_S
            idle = report(server, auth("small"), "idle", body(clock, 0, ns="t/small"))
            busy = report(server, auth("small"), "busy", body(clock, 800, ns="t/small"))
        assert rates(idle, "t/small") < 0.02 * QUOTA
        assert rates(busy, "t/small") >= 800


@pytest.mark.usefixtures("shared")
class TestReporterCap:
    def test_a_role_past_the_cap_is_refused_with_a_reason(
        self, server: FastAPI, auth: Auth, clock: FakeClock
    ) -> None:
        for i in range(CAP):
            report(server, auth("big"), f"b{i}", body(clock, 100, ns="t/big"))
        response = TestClient(server).post(
            "/quota/v1/reporters/one-too-many/reports",
            json=body(clock, 100, ns="t/big"),
            headers=auth("big"),
        )
        assert response.status_code == 429
        assert "RG_MAX_REPORTERS_PER_NAMESPACE" in response.json()["reason"]
        # Known reporters go on; another namespace's role is not counted against this one.
        report(server, auth("big"), "b0", body(clock, 100, ns="t/big"))
        report(server, auth("small"), "s0", body(clock, 100, ns="t/small"))

    def test_a_released_or_silent_reporter_frees_its_place(
        self, server: FastAPI, auth: Auth, clock: FakeClock
    ) -> None:
        for i in range(CAP):
            report(server, auth("big"), f"b{i}", body(clock, 100, ns="t/big"))
        client = TestClient(server)
        assert client.delete("/quota/v1/reporters/b0", headers=auth("big")).status_code == 204
        report(server, auth("big"), "new", body(clock, 100, ns="t/big"))
        clock.now += 4 * INTERVAL_S  # all silent for more than three intervals
        report(server, auth("big"), "newer", body(clock, 100, ns="t/big"))

    def test_superusers_are_not_capped(self, server: FastAPI, auth: Auth, clock: FakeClock) -> None:
        for i in range(CAP + 2):
            report(server, auth("admin"), f"su{i}", body(clock, 100, ns="t/big"))
