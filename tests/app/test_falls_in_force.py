"""A fall counts in force until the worker says it applied it (both databases, two server
processes' worth of apps): the room a falling reporter frees is no one else's while its
answer is still on its way, or lost."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.app.test_group_levels import in_force
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    INTERVAL_S,
    QUOTA,
    Auth,
    allocated,
    body,
    report,
    world,
)
from tests.factories import FakeClock

DEMAND = 800  # each of a and b: together they want more than the quota, so each gets half


def saying(clock: FakeClock, enforced: float) -> Any:
    """A report of a worker wanting `DEMAND` that says it enforces ``enforced``."""
    payload = body(clock, DEMAND)
    payload["namespaces"]["t/ns"]["publishMsgs"]["allocation"] = enforced
    return payload


class _Fleet:
    """Workers a and b, each reporting to the server it is given, each enforcing what its
    last answer it received said (an answer not received is not applied)."""

    def __init__(self, servers: list[FastAPI], headers: dict[str, str], clock: FakeClock) -> None:
        self.servers, self.headers, self.clock = servers, headers, clock
        self.enforced = {"a": -1.0, "b": -1.0}

    def report(self, worker: str, server: int, *, received: bool = True) -> dict[str, Any]:
        answer = report(
            self.servers[server], self.headers, worker, saying(self.clock, self.enforced[worker])
        )
        if received:
            self.enforced[worker] = allocated(answer)
        return answer

    def enforced_sum(self) -> float:
        return sum(rate for rate in self.enforced.values() if rate > 0)


@pytest.mark.usefixtures("world")
class TestFallsInForce:
    @pytest.mark.parametrize("confirming_server", [0, 1], ids=["same-process", "other-process"])
    def test_the_room_of_a_fall_is_free_once_the_worker_applied_it(
        self,
        servers: list[FastAPI],
        auth: Auth,
        clock: FakeClock,
        engine: Engine,
        confirming_server: int,
    ) -> None:
        fleet = _Fleet(servers, auth("job"), clock)
        for _ in range(4):  # a alone: it wants 800 and is given growth room on top
            clock.now += INTERVAL_S
            fleet.report("a", 0)
        assert fleet.enforced["a"] == pytest.approx(QUOTA)
        fleet.report("b", 1)  # b joins: a probe to start with
        probe = fleet.enforced["b"]
        assert 0 < probe <= 0.02 * QUOTA

        # a's share falls to half; its answer is still on its way when b plans.
        clock.now += INTERVAL_S / 8
        fall = fleet.report("a", 0, received=False)
        assert allocated(fall) == pytest.approx(QUOTA / 2)
        assert fall["reportIntervalMs"] < INTERVAL_S * 1000  # it says so soon
        stored, rows = in_force(engine)
        assert stored == pytest.approx(QUOTA + probe) and rows == pytest.approx(stored)
        fleet.report("b", 1)
        assert fleet.enforced["b"] == pytest.approx(probe)  # nothing is free: b waits
        assert fleet.enforced_sum() <= QUOTA * 1.05

        # The answer reaches a at last; b still waits until a says so.
        fleet.enforced["a"] = allocated(fall)
        fleet.report("b", 1)
        assert fleet.enforced["b"] == pytest.approx(probe)
        # a's next report says it applied it: the room is b's from then on.
        clock.now += INTERVAL_S / 8
        fleet.report("a", confirming_server)
        stored, rows = in_force(engine)
        assert stored == pytest.approx(QUOTA / 2 + probe) and rows == pytest.approx(stored)
        fleet.report("b", 1)
        assert fleet.enforced["b"] == pytest.approx(QUOTA / 2)
        assert fleet.enforced_sum() == pytest.approx(QUOTA)

    def test_a_lost_answer_keeps_its_room_counted(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        fleet = _Fleet(servers, auth("job"), clock)
        for _ in range(4):
            clock.now += INTERVAL_S
            fleet.report("a", 0)
        fleet.report("b", 1)
        probe = fleet.enforced["b"]
        clock.now += INTERVAL_S / 8
        fleet.report("a", 0, received=False)  # lost: a goes on at the whole quota
        clock.now += INTERVAL_S / 8
        fleet.report("a", 1, received=False)  # says it still enforces it: nothing released
        fleet.report("b", 0)
        assert fleet.enforced["b"] == pytest.approx(probe)
        assert fleet.enforced_sum() <= QUOTA * 1.05
        stored, rows = in_force(engine)
        assert stored == pytest.approx(QUOTA + probe) and rows == pytest.approx(stored)
        clock.now += INTERVAL_S / 8
        fleet.report("a", 0)  # received this time
        fleet.report("a", 1)  # and said
        fleet.report("b", 0)
        assert fleet.enforced["b"] == pytest.approx(QUOTA / 2)
        assert fleet.enforced_sum() == pytest.approx(QUOTA)

    def test_a_reporter_that_says_nothing_has_its_falls_counted_at_once(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, engine: Engine
    ) -> None:
        # A reporter of an older rgspark, or another client that leaves `allocation` out:
        # its falls are counted from the moment they are granted, as it says nothing else.
        headers = auth("job")
        for _ in range(4):
            clock.now += INTERVAL_S
            report(servers[0], headers, "a", body(clock, DEMAND))
        probe = allocated(report(servers[1], headers, "b", body(clock, DEMAND)))
        clock.now += INTERVAL_S / 8
        assert allocated(report(servers[0], headers, "a", body(clock, DEMAND))) == (
            pytest.approx(QUOTA / 2)
        )
        stored, rows = in_force(engine)
        assert stored == pytest.approx(QUOTA / 2 + probe) and rows == pytest.approx(stored)
        assert allocated(report(servers[1], headers, "b", body(clock, DEMAND))) == (
            pytest.approx(QUOTA / 2)
        )


@pytest.mark.usefixtures("world")
@pytest.mark.parametrize(
    ("allocation", "problem"),
    [(-2, "greater than or equal to -1"), ("100", "valid number"), (True, "valid number")],
)
def test_a_bad_allocation_is_a_400_naming_it(
    servers: list[FastAPI], auth: Auth, clock: FakeClock, allocation: object, problem: str
) -> None:
    payload = body(clock, DEMAND)
    payload["namespaces"]["t/ns"]["publishMsgs"]["allocation"] = allocation
    response = TestClient(servers[0]).post(
        "/quota/v1/reporters/a/reports", json=payload, headers=auth("job")
    )
    assert response.status_code == 400, response.text
    assert "allocation" in response.text and problem in response.text


@pytest.mark.usefixtures("world")
def test_a_rate_past_any_demand_is_said_as_it_is(
    servers: list[FastAPI], auth: Auth, clock: FakeClock
) -> None:
    # A byte rate may be set up to 2^63 - 1: a worker alone in its group enforces that.
    assert allocated(report(servers[0], auth("job"), "a", saying(clock, 2.0**63))) >= 0
