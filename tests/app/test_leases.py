"""Leases and wakes (`app.quota.leases`), through real reports on two server processes' worth
of apps (both databases): a steady reporter holds its answer for a lease and stays alive
through it; a change to the group's shares moves the group's wake, which a long poll on
``/quota/v1/changes`` answers at once."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.access import Principal
from app.quota import reporters, store
from app.quota.schemas import UsageReport
from app.state import state_of
from rgspark.wire import GRACE_INTERVALS
from tests.app.test_quota_reports import (  # noqa: F401 (world is a fixture)
    INTERVAL_S,
    LEASE_MS,
    QUOTA,
    Auth,
    allocated,
    body,
    both_want_800,
    report,
    world,
)
from tests.app.test_shared_transaction import statements
from tests.factories import FakeClock

LEASE_INTERVALS = round(LEASE_MS / 1000 / INTERVAL_S)


def changes(app: FastAPI, auth: Auth, **params: Any) -> dict[str, Any]:
    response = TestClient(app).get("/quota/v1/changes", params=params, headers=auth("job"))
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def wake(app: FastAPI, auth: Auth) -> int:
    """The wake of group ``rg``, as a worker's first poll reads it."""
    found: int = changes(app, auth, group=":rg", waitMs=0)["groups"]["rg"]
    return found


@pytest.mark.usefixtures("world")
class TestLeases:
    def test_a_steady_reporter_holds_its_answer_for_a_lease(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        first = report(servers[0], auth("job"), "a", body(clock, 800))
        assert first["leaseMs"] == 1000  # a newcomer settles: one interval
        both_want_800(servers, auth("job"), clock, rounds=6)
        clock.now += INTERVAL_S
        steady = report(servers[1], auth("job"), "a", body(clock, 800))
        assert steady["leaseMs"] == steady["reportIntervalMs"] == LEASE_MS
        assert LEASE_MS > 1000
        # Its demand moves: it settles again, an interval at a time.
        clock.now += INTERVAL_S
        moved = report(servers[0], auth("job"), "a", body(clock, 200))
        assert moved["leaseMs"] == 1000

    def test_a_demand_that_stays_above_its_share_keeps_the_lease(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        # Both want 800 of 1,000 msgs/s: each one's share is 500. The group does not limit
        # bytes. Each reports to the process that holds its plans.
        job = auth("job")

        def sent(demand: float, bytes_demand: float = 1000.0) -> Any:
            payload = body(clock, demand, used=800)
            payload["namespaces"]["t/ns"]["publishBytes"] = {"used": 1000, "demand": bytes_demand}
            return payload

        for _ in range(6):
            clock.now += INTERVAL_S
            report(servers[0], job, "a", sent(800))
            report(servers[1], job, "b", sent(800))
        for demand, bytes_demand in ((1200, 1000.0), (650, 1000.0), (800, 5e6)):
            clock.now += INTERVAL_S
            assert report(servers[0], job, "a", sent(demand, bytes_demand))["leaseMs"] == LEASE_MS
            # Nothing b's share comes from moved: its plan stands.
            assert report(servers[1], job, "b", sent(800))["leaseMs"] == LEASE_MS
        # Under its share, a's demand is recorded: it settles again, and so does b.
        clock.now += INTERVAL_S
        assert report(servers[0], job, "a", sent(300))["leaseMs"] == 1000
        assert report(servers[1], job, "b", sent(800))["leaseMs"] == 1000

    def test_a_demand_held_above_its_share_is_recorded_once_the_share_rises(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)  # 500 each
        clock.now += INTERVAL_S
        held = report(servers[0], job, "a", body(clock, 1200, used=800))
        assert held["leaseMs"] == LEASE_MS  # 800 stays recorded: above 500 either way
        released = TestClient(servers[1]).delete("/quota/v1/reporters/b", headers=job)
        assert released.status_code == 204
        # Alone, a's share is the quota: its plan from the 800 recorded gives 800, and the
        # report after it records 1,200, no longer above its share.
        shares = []
        for _ in range(3):
            clock.now += INTERVAL_S
            answer = report(servers[0], job, "a", body(clock, 1200, used=800))
            shares.append(answer["namespaces"]["t/ns"]["fallbackAllocations"]["publishMsgs"])
        assert shares[:2] == [800, QUOTA]

    def test_a_reporter_is_alive_through_its_lease_and_gone_two_intervals_after(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        clock.now += INTERVAL_S
        assert report(servers[0], job, "a", body(clock, 800))["leaseMs"] == LEASE_MS
        # "a" is silent past the three intervals that would have ended it without a lease.
        b_shares_with_a_while_alive(servers, job, clock, LEASE_MS / 1000)


def b_shares_with_a_while_alive(
    servers: list[FastAPI], job: dict[str, str], clock: FakeClock, lease_s: float
) -> None:
    """ "a" just answered with ``lease_s``, then silent: "b", reporting every interval, shares
    the quota with it through the lease (and an interval), and has all of it once "a" is gone,
    two intervals after its lease."""
    answered_at = clock.now
    while clock.now < answered_at + lease_s + INTERVAL_S:
        clock.now += INTERVAL_S
        rate = allocated(report(servers[1], job, "b", body(clock, 800)))
        assert rate == pytest.approx(QUOTA / 2, rel=0.05)
    for _ in range(3):
        clock.now += INTERVAL_S
        rate = allocated(report(servers[1], job, "b", body(clock, 800)))
    assert rate == pytest.approx(QUOTA, rel=0.05)


def paced_report(app: FastAPI, reporter: str, payload: Any, pace_s: float) -> dict[str, Any]:
    """A report of role ``job``, stored as its namespace's lane stores it when it paces its
    workers to ``pace_s`` (`app.quota.pacing`)."""
    state = state_of(app)
    with state.sessions.begin() as session:
        serving = store.Serving(
            interval_s=state.settings.report_interval_seconds,
            max_lease_s=state.settings.report_lease_seconds,
            cache=state.report_cache,
        )
        report = {
            "principal": Principal("job", is_superuser=False),
            "reporter_id": reporter,
            "report": UsageReport.model_validate(payload),
            "now": state.clock(),
            "pace_s": pace_s,
        }
        claim = store.claim(serving, **report)
        answer = store.submit(session, serving, **report, claim=claim)
    found: dict[str, Any] = json.loads(answer)
    return found


@pytest.mark.usefixtures("world")
class TestPacedAnswers:
    PACE_S = 30.0

    def test_a_paced_answer_asks_for_no_report_sooner_and_holds_as_long(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        both_want_800(servers, auth("job"), clock, rounds=6)
        clock.now += INTERVAL_S
        steady = paced_report(servers[0], "a", body(clock, 800), self.PACE_S)
        assert steady["reportIntervalMs"] == steady["leaseMs"] == self.PACE_S * 1000
        clock.now += INTERVAL_S
        settling = paced_report(servers[0], "a", body(clock, 200), self.PACE_S)
        assert settling["reportIntervalMs"] == settling["leaseMs"] == self.PACE_S * 1000
        # Under the lease, the pace changes nothing.
        clock.now += INTERVAL_S
        assert paced_report(servers[0], "a", body(clock, 200), 0.5)["leaseMs"] == LEASE_MS

    def test_a_steady_report_on_a_new_pace_writes_its_lease_once(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        # Each answer's pace is the namespace's, spread at random: its lease is claimed
        # for that pace up front, not claimed for the last one and then moved.
        both_want_800(servers, auth("job"), clock, rounds=6)
        for pace_s in (self.PACE_S, self.PACE_S * 1.3, self.PACE_S * 1.1):
            clock.now += INTERVAL_S
            with statements(state_of(servers[0]).engine, "quota_reporters") as seen:
                answer = paced_report(servers[0], "a", body(clock, 800), pace_s)
            assert answer["leaseMs"] == round(pace_s * 1000)
            assert len([s for s in seen if not s.lstrip().startswith("SELECT")]) == 1

    @pytest.mark.parametrize("pace_s", [0.0, PACE_S])
    def test_a_paced_reporter_takes_no_rise_of_less_than_a_hundredth(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock, pace_s: float
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        clock.now += INTERVAL_S
        # b wants less than its share now: a's share rises from 500 to 504 (0.8%).
        assert allocated(report(servers[1], job, "b", body(clock, 496))) == pytest.approx(496)
        rate = allocated(paced_report(servers[0], "a", body(clock, 800), pace_s))
        assert rate == pytest.approx(500 if pace_s else 504)
        # A rise of 10% is taken, paced or not.
        clock.now += INTERVAL_S
        assert allocated(report(servers[1], job, "b", body(clock, 450))) == pytest.approx(450)
        rate = allocated(paced_report(servers[0], "a", body(clock, 800), pace_s))
        assert rate == pytest.approx(550)

    def test_a_paced_reporter_is_alive_through_its_pace(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        clock.now += INTERVAL_S
        paced_report(servers[0], "a", body(clock, 800), self.PACE_S)
        b_shares_with_a_while_alive(servers, job, clock, self.PACE_S)


@pytest.mark.usefixtures("world")
class TestWakes:
    def test_steady_reports_wake_nobody_and_a_newcomer_wakes_the_group(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        before = wake(servers[0], auth)
        both_want_800(servers, job, clock, rounds=3)
        assert wake(servers[1], auth) == before  # nothing moved
        # A third worker wanting as much moves every share from 500 to 333.
        clock.now += INTERVAL_S
        report(servers[1], job, "c", body(clock, 800))
        assert wake(servers[0], auth) > before

    def test_a_worker_leaving_with_its_share_wakes_the_group(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        before = wake(servers[0], auth)
        response = TestClient(servers[1]).delete("/quota/v1/reporters/a", headers=job)
        assert response.status_code == 204
        assert wake(servers[0], auth) > before

    def test_silent_workers_forgotten_wake_the_group_as_a_release_does(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        both_want_800(servers, auth("job"), clock, rounds=6)
        before = wake(servers[0], auth)
        # Both fall silent until their leases and the grace after them are over; the
        # upkeep that every process runs then forgets them, with no report to see it.
        clock.now += (LEASE_INTERVALS + GRACE_INTERVALS + 1) * INTERVAL_S
        state = state_of(servers[0])
        with state.sessions() as session, session.begin():
            reporters.expire(session, datetime.fromtimestamp(clock.now, UTC), state.report_cache)
        assert wake(servers[1], auth) > before

    def test_a_long_poll_is_answered_as_soon_as_the_wake_moves(
        self, servers: list[FastAPI], auth: Auth, clock: FakeClock
    ) -> None:
        job = auth("job")
        both_want_800(servers, job, clock, rounds=6)
        seen = changes(servers[0], auth, group=":rg", waitMs=0)
        params = {"after": seen["generation"], "group": f"{seen['groups']['rg']}:rg"}
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            waiting = pool.submit(changes, servers[0], auth, **params, waitMs=20_000)
            time.sleep(0.5)  # the poll is held meanwhile
            assert not waiting.done()
            clock.now += INTERVAL_S
            report(servers[1], job, "c", body(clock, 800))  # on the other process
            answer = waiting.result(timeout=15)
        assert time.monotonic() - started < 10
        assert answer["generation"] == seen["generation"]  # no admin change: a wake
        assert answer["groups"]["rg"] > seen["groups"]["rg"]
