"""A group's summary and sums in force (`app.quota.levels`), through real reports on two
server processes' worth of apps (both databases): the sums stay those of the rows counted in
the group whatever joins, leaves, moves or expires, and the summary is made anew only when
it no longer holds."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.config import Settings
from app.models import QuotaGroup, QuotaUsage
from app.quota.levels import GroupSummary
from app.quota.tuning import SUMMARY_SHARE
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    INTERVAL_S,
    QUOTA,
    Auth,
    allocated,
    body,
    report,
    world,
)
from tests.conftest import SUPERUSER
from tests.factories import FakeClock


def in_force(engine: Engine) -> tuple[float, float]:
    """The group's stored sum in force, and the sum of its rows' allocations."""
    with engine.connect() as connection:
        stored = connection.scalar(
            select(QuotaGroup.publish_msgs_in_force).where(QuotaGroup.name == "rg")
        )
        rows = connection.scalar(
            select(func.coalesce(func.sum(QuotaUsage.publish_msgs_allocation), 0.0)).where(
                QuotaUsage.resource_group == "rg"
            )
        )
    return float(stored or 0.0), float(rows or 0.0)


def summary(engine: Engine) -> GroupSummary:
    with engine.connect() as connection:
        text = connection.scalar(select(QuotaGroup.levels).where(QuotaGroup.name == "rg"))
    assert text is not None
    return GroupSummary.from_json(text)


@pytest.mark.usefixtures("world")
class TestSumsInForce:
    def test_the_sums_follow_joins_leaves_moves_and_expiry(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        headers = auth("job")
        demands = {f"w{i}": 150.0 * (i + 1) for i in range(6)}
        for round_ in range(6):
            clock.now += INTERVAL_S / 3
            for index, (reporter, demand) in enumerate(demands.items()):
                if round_ >= index // 2:  # two more workers join every round
                    report(servers[index % 2], headers, reporter, body(clock, demand))
            stored, rows = in_force(engine)
            assert stored == pytest.approx(rows, abs=1e-6)
            assert stored <= QUOTA * 1.05

        # One releases its share, one moves to a namespace of no group, one goes silent.
        client = TestClient(servers[0])
        assert client.delete("/quota/v1/reporters/w0", headers=headers).status_code == 204
        report(servers[1], auth(SUPERUSER), "w1", body(clock, 300, ns="t/other"))
        stored, rows = in_force(engine)
        assert stored == pytest.approx(rows, abs=1e-6)
        # A silent reporter is gone once its lease (it may have held a steady one) and two
        # intervals have passed.
        for _ in range(round(Settings().report_lease_seconds / INTERVAL_S) + 3):
            clock.now += INTERVAL_S
            for index, reporter in enumerate(["w2", "w3", "w4"]):
                report(servers[index % 2], headers, reporter, body(clock, demands[reporter]))
            stored, rows = in_force(engine)
            assert stored == pytest.approx(rows, abs=1e-6)
        with engine.connect() as connection:
            left = set(connection.scalars(select(QuotaUsage.reporter_id).distinct()))
        assert left == {"w2", "w3", "w4"}  # w1 and w5 went silent and expired
        # The three left in the group get the whole quota between them, fairly.
        rates = [
            allocated(report(servers[0], headers, r, body(clock, 800))) for r in ("w2", "w3", "w4")
        ]
        assert sum(rates) == pytest.approx(QUOTA, rel=0.05)


@pytest.mark.usefixtures("world")
class TestSummary:
    def test_a_small_group_is_summarized_afresh_at_every_report_after_a_change(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        headers = auth("job")
        report(servers[0], headers, "a", body(clock, 2000))
        first = summary(engine)
        report(servers[1], headers, "b", body(clock, 300))
        second = summary(engine)
        assert second.marker != first.marker
        assert second.units == 2
        # a's next answer knows b: its fair share (its fallback) is what b leaves it.
        answer = report(servers[0], headers, "a", body(clock, 2000))
        assert answer["namespaces"]["t/ns"]["fallbackAllocations"]["publishMsgs"] == (
            pytest.approx(QUOTA - 300)
        )

    def test_a_big_group_grants_a_share_of_its_reporters_from_one_summary(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        headers = auth("job")
        for index in range(128):
            report(servers[index % 2], headers, f"w{index}", body(clock, 100))
        made = summary(engine)
        assert made.units >= 120
        made_demand = made.dimensions[0].demand if made.dimensions[0] else None
        # The group changes at every report (a demand doubles); the summary holds until a
        # `SUMMARY_SHARE` of the reporters it saw were granted from it, and the sums it shows
        # follow every report meanwhile.
        moved = 0
        while made.grants + moved < SUMMARY_SHARE * made.units:
            report(servers[moved % 2], headers, f"w{moved}", body(clock, 200))
            moved += 1
            kept = summary(engine)
            assert (kept.marker, kept.grants) == (made.marker, made.grants + moved)
            assert kept.dimensions[0] is not None
            assert kept.dimensions[0].demand == pytest.approx((made_demand or 0) + 100 * moved)
        assert moved >= 1
        report(servers[0], headers, f"w{moved}", body(clock, 200))
        fresh = summary(engine)
        assert fresh.marker != made.marker
        assert fresh.grants == 1
