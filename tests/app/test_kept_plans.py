"""What a plan that changes little stores (both databases, two server processes' worth of
apps): a rise moves no marker, so the others keep their plans; a plan that grants what is in
force already, from a summary that holds, stores nothing at all."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, select

from app.models import QuotaGroup, QuotaUsage
from app.state import state_of
from tests.app.test_falls_in_force import _Fleet
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    INTERVAL_S,
    QUOTA,
    Auth,
    allocated,
    body,
    report,
    world,
)
from tests.app.test_shared_transaction import statements
from tests.factories import FakeClock


def group_row(engine: Engine) -> tuple[Any, ...]:
    """Group ``rg``'s marker, summary and sum in force, as stored."""
    with engine.connect() as connection:
        row = connection.execute(
            select(QuotaGroup.marker, QuotaGroup.levels, QuotaGroup.publish_msgs_in_force).where(
                QuotaGroup.name == "rg"
            )
        ).one()
    return tuple(row)


def usage_row(engine: Engine, reporter: str) -> tuple[Any, ...]:
    """The reporter's row of ``t/ns``, as stored."""
    with engine.connect() as connection:
        row = connection.execute(
            select(
                QuotaUsage.written_at,
                QuotaUsage.planned_marker,
                QuotaUsage.publish_msgs_allocation,
            ).where(QuotaUsage.reporter_id == reporter)
        ).one()
    return tuple(row)


@pytest.mark.usefixtures("world")
class TestKeptPlans:
    def test_a_rise_leaves_the_groups_marker(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        job = auth("job")
        for _ in range(4):  # a and b want 800 each: half the quota each
            clock.now += INTERVAL_S
            report(servers[0], job, "a", body(clock, 800))
            report(servers[1], job, "b", body(clock, 800))
        # b wants 200 now: it falls, which frees room, so the group's marker moves.
        clock.now += INTERVAL_S
        before = group_row(engine)
        assert allocated(report(servers[1], job, "b", body(clock, 200))) == pytest.approx(200)
        fell = group_row(engine)
        assert fell[0] != before[0]
        # a rises into that room: the room is taken, nobody else's plan changes.
        assert allocated(report(servers[0], job, "a", body(clock, 800))) == pytest.approx(800)
        rose = group_row(engine)
        assert rose[2] == pytest.approx(QUOTA)  # the rise is in the sum in force
        assert rose[0] == fell[0]
        # b's next report keeps its plan, and its answer.
        clock.now += INTERVAL_S
        assert allocated(report(servers[0], job, "b", body(clock, 200))) == pytest.approx(200)

    @pytest.mark.parametrize("server", [0, 1], ids=["same-process", "other-process"])
    def test_a_plan_that_grants_what_is_in_force_stores_nothing(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        server: int,
    ) -> None:
        fleet = _Fleet(servers, auth("job"), clock)
        for _ in range(4):  # a alone: the whole quota
            clock.now += INTERVAL_S
            fleet.report("a", 0)
        fleet.report("b", 1)  # b joins with a probe, which moves the marker
        probe = fleet.enforced["b"]
        # a's share falls to half, but counts in force until a says it applied it: the
        # summary is made anew at the group's marker now, and nothing is free for b.
        clock.now += INTERVAL_S / 8
        fall = fleet.report("a", 0, received=False)
        group, b_row = group_row(engine), usage_row(engine, "b")
        assert b_row[1] != group[0]  # b planned under the marker before its join
        # b plans again, for the moved marker; then, as it waits for room (its answer asks
        # it to report early), at each report: it reads the group's row, and stores nothing.
        for _ in range(2):
            clock.now += INTERVAL_S / 8
            with statements(state_of(servers[server]).engine, "FROM quota_groups") as seen:
                answer = fleet.report("b", server)
            assert allocated(answer) == pytest.approx(probe)
            assert answer["reportIntervalMs"] < INTERVAL_S * 1000
            assert len([s for s in seen if "quota_groups.levels" in s]) == 1
            assert group_row(engine) == group
            assert usage_row(engine, "b") == b_row
        # Once a has applied its fall and said so, b rises into the room at its next report.
        fleet.enforced["a"] = allocated(fall)
        clock.now += INTERVAL_S / 8
        fleet.report("a", 0)
        assert allocated(fleet.report("b", server)) == pytest.approx(QUOTA / 2)
