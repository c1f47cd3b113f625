"""The worker side of quota sharing, from plain Python against a real server over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.models import QuotaReporter
from rgspark import ServerUnreachableError
from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from rgspark.wire import UNKNOWN_DEMAND
from tests.factories import FakeClock, create_group, create_namespace, create_tenant
from tests.spark.conftest import FakeMonotonicClock, running_server
from tests.spark.test_reporter_wire import MockServer, advance, mock_reporter, next_report

Auth = Callable[[str], dict[str, str]]
QUOTA = 1000


@pytest.fixture
def job_token(client: TestClient, token: Callable[[str], str]) -> str:
    """Group ``rg`` (publish 1000 msgs/s) on ``t/ns``; a token for role ``job``, which produces."""
    create_group(client, "rg", publishRateInMsgs=QUOTA)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group="rg", producers=["job"])
    return token("job")


def reporters(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(QuotaReporter)) or 0)


def test_report_applies_the_allocation_and_close_releases_it(
    live_url: str, job_token: str, engine: Engine
) -> None:
    quota = NamespaceQuota("t", "ns")
    reporter = Reporter(AdminClient(live_url, token=job_token), [quota])
    assert quota.rate("publishMsgs") is None
    next_in = reporter.run_once()
    assert 0 < next_in <= 1.0
    assert 0 < (quota.rate("publishMsgs") or 0) <= QUOTA
    assert quota.rate("publishBytes") is None  # the group leaves bytes unlimited
    assert reporters(engine) == 1
    reporter.close()
    assert reporters(engine) == 0


def test_two_reporters_converge_on_shares_of_the_quota(live_url: str, job_token: str) -> None:
    quotas = [NamespaceQuota("t", "ns"), NamespaceQuota("t", "ns")]
    processes = [Reporter(AdminClient(live_url, token=job_token), [q]) for q in quotas]
    for _ in range(8):
        for quota, process in zip(quotas, processes, strict=True):
            # Both want far more than their share: each charge leaves them owing.
            quota.charge("publish", 400, 0)
            process.run_once()
    rates = [q.rate("publishMsgs") or 0.0 for q in quotas]
    assert sum(rates) <= QUOTA * 1.05
    assert rates[0] == pytest.approx(QUOTA / 2, rel=0.1)
    assert rates[1] == pytest.approx(QUOTA / 2, rel=0.1)
    for process in processes:
        process.close()


def test_unreachable_server_keeps_the_last_allocation(live_url: str, job_token: str) -> None:
    quota = NamespaceQuota("t", "ns")
    with Reporter(AdminClient(live_url, token=job_token), [quota]) as reporter:
        reporter.run_once()
    rate = quota.rate("publishMsgs")
    gone = Reporter(AdminClient("http://127.0.0.1:1", token=job_token), [quota])
    with pytest.raises(ServerUnreachableError):
        gone.run_once()
    gone.close()
    assert quota.rate("publishMsgs") == rate


def test_a_kind_announced_but_not_yet_charged_claims_a_share(live_url: str, job_token: str) -> None:
    quota = NamespaceQuota("t", "ns")
    quota.use("publish")
    assert set(quota.usage()) == {"publishMsgs", "publishBytes"}
    with Reporter(AdminClient(live_url, token=job_token), [quota]) as reporter:
        reporter.run_once()
    assert quota.rate("publishMsgs") == pytest.approx(QUOTA, rel=0.05)


def test_initial_rate_holds_before_the_first_answer() -> None:
    quota = NamespaceQuota("t", "ns", initial_rate=50)
    assert quota.rate("dispatchBytes") == 50
    quota.apply({"publishMsgs": 10, "publishBytes": -1})
    assert quota.rate("publishMsgs") == 10
    assert quota.rate("publishBytes") is None


# ---------------------------------------------------------------------------------------------
# On fake time, against the server's answers (`MockServer`): idle is known, when reports go
# out, fail-static


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server() -> MockServer:
    return MockServer()


def work(
    quota: NamespaceQuota,
    wall: FakeClock,
    clock: FakeMonotonicClock,
    ticks: int,
    msgs: float,
    nbytes: float = 0,
) -> None:
    """Charge ``msgs`` and ``nbytes`` every 10 ms for ``ticks`` ticks."""
    for _ in range(ticks):
        advance(wall, clock, 0.01)
        quota.charge("publish", msgs, nbytes)


def reported_busy(
    server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
) -> tuple[NamespaceQuota, Reporter]:
    """A worker that charged 100 msgs/s for half a second, then reported."""
    quota, reporter = mock_reporter(server, wall, clock)
    quota.use("publish")
    work(quota, wall, clock, 50, 1)
    reporter.report()
    return quota, reporter


class TestIdleIsKnown:
    def demand(self, quota: NamespaceQuota, interval_s: float = 1.0) -> float:
        return quota.usage(interval_s)["publishMsgs"]["demand"]

    def test_announced_but_never_charged_is_idle_after_its_claim(
        self, clock: FakeMonotonicClock
    ) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        assert self.demand(quota) == UNKNOWN_DEMAND  # a task is starting: owed a share
        clock.advance(0.2)
        assert self.demand(quota) == UNKNOWN_DEMAND
        clock.advance(0.05)
        assert self.demand(quota) == 0  # a quarter interval without a charge: idle

    def test_announcing_again_does_not_prolong_the_claim(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        clock.advance(0.6)
        quota.use("publish")  # another task of the same stage, that charges nothing either
        clock.advance(0.4)
        assert self.demand(quota) == 0

    def test_a_task_after_idling_claims_again(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        clock.advance(2)
        assert self.demand(quota) == 0
        quota.use("publish")  # the next stage
        assert self.demand(quota) == UNKNOWN_DEMAND

    def test_the_claim_is_the_server_s_interval(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        clock.advance(0.3)
        assert self.demand(quota, interval_s=0.25) == 0

    def test_a_newcomer_asked_to_report_early_still_claims_at_its_second_report(
        self, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        # The server asks a newcomer back after 125 ms; its interval is still a second, so
        # a second report 200 ms on (a slow first answer) still says "not known yet".
        server = MockServer(interval_ms=125, period_ms=1000)
        quota, reporter = mock_reporter(server, wall, clock)
        quota.use("publish")
        reporter.report()
        advance(wall, clock, 0.2)
        reporter.report()
        second = server.reports[1]["namespaces"]["t/ns"]["publishMsgs"]
        assert second["demand"] == UNKNOWN_DEMAND
        assert reporter.period_s == 1.0

    def test_a_charge_ends_the_claim_with_a_measurement(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        for _ in range(20):
            clock.advance(0.01)
            quota.charge("publish", 3, 0)
        assert self.demand(quota) == pytest.approx(300)

    def test_the_claim_running_out_is_worth_an_early_report(
        self, clock: FakeMonotonicClock
    ) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        self.demand(quota)
        clock.advance(0.2)
        assert not quota.demand_moved()
        clock.advance(0.05)
        assert quota.demand_moved()
        self.demand(quota)
        assert not quota.demand_moved()

    def test_waking_is_worth_an_early_report(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock)
        quota.use("publish")
        clock.advance(5)
        assert self.demand(quota) == 0
        clock.advance(0.01)
        quota.charge("publish", 5, 0)
        clock.advance(0.005)
        assert quota.demand_moved()  # from its first charge on
        for _ in range(30):
            clock.advance(0.01)
            quota.charge("publish", 5, 0)
        # Measured since it woke, not averaged with the idle time before.
        assert self.demand(quota) == pytest.approx(500, rel=0.05)


class TestWhenReportsGoOut:
    def test_on_the_interval_the_server_asks(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        _, reporter = mock_reporter(server, wall, clock)
        assert reporter.due_in(wall()) == 0  # the first at once
        assert reporter.report()
        assert 0 < reporter.due_in(wall()) <= 0.125  # looks again every eighth interval
        advance(wall, clock, 0.999)
        assert reporter.due_in(wall()) == pytest.approx(0.001, abs=1e-6)
        advance(wall, clock, 0.001)
        assert reporter.due_in(wall()) == 0

    def test_a_task_starting_reports_early_but_not_at_once(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = mock_reporter(server, wall, clock)
        reporter.report()
        advance(wall, clock, 0.05)
        quota.use("publish")
        assert reporter.due_in(wall()) == pytest.approx(0.075, abs=1e-6)  # MIN_SPACING on
        advance(wall, clock, 0.075)
        assert reporter.due_in(wall()) == 0
        reporter.report()
        assert server.reports[-1]["namespaces"]["t/ns"]["publishMsgs"]["demand"] == 1e18

    def test_a_demand_that_moves_reports_early(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = reported_busy(server, wall, clock)
        work(quota, wall, clock, 20, 3)  # now 300 per second
        assert reporter.due_in(wall()) == 0

    def test_a_task_of_a_kind_already_busy_waits_for_the_answer_s_time(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        # Spark starts a task per partition, and each announces its kind.
        quota, reporter = reported_busy(server, wall, clock)
        work(quota, wall, clock, 20, 1)
        quota.use("publish")  # the next task, 200 ms on: the worker is busy already
        assert reporter.due_in(wall()) > 0
        while (seconds := reporter.due_in(wall())) > 0:
            advance(wall, clock, min(seconds, 0.01))
            quota.charge("publish", 1, 0)
        reporter.report()
        sent = server.reports[-1]["namespaces"]["t/ns"]["publishMsgs"]
        assert sent["demand"] == pytest.approx(100, rel=0.1)  # measured, not claimed anew

    def test_a_demand_moving_above_its_fair_share_waits_for_the_answer_s_time(
        self, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        # Its fair share is 500 msgs/s; the group does not limit bytes (-1).
        server = MockServer(allocation=5000, fallback=500)
        quota, reporter = mock_reporter(server, wall, clock)
        quota.use("publish")
        work(quota, wall, clock, 30, 10, 1_000)  # 1,000 msgs/s: above its share
        reporter.report()
        # Twice that, and a hundred times the bytes: no grant changes.
        work(quota, wall, clock, 30, 20, 100_000)
        assert reporter.due_in(wall()) > 0
        work(quota, wall, clock, 30, 3, 100)  # 300 msgs/s: under its share
        assert reporter.due_in(wall()) == 0

    def test_no_early_reports_while_the_server_fails(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = mock_reporter(server, wall, clock)
        reporter.report()
        server.failing = 503
        advance(wall, clock, 1)
        assert not reporter.report()
        advance(wall, clock, 0.2)
        quota.use("publish")
        assert reporter.due_in(wall()) == pytest.approx(1.8, abs=1e-6)  # backoff: 2 intervals

    def test_the_reporter_thread_s_loop_on_fake_time(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        reporter: Reporter

        def sleep(seconds: float) -> None:
            advance(wall, clock, seconds)
            if wall() >= start + 4.5:
                reporter.close()

        start = wall()
        _, reporter = mock_reporter(server, wall, clock, sleep=sleep)
        reporter._run()
        sent = [body["sentAtMs"] / 1000 - start for body in server.reports]
        assert sent == pytest.approx([0, 1, 2, 3, 4])


class TestFailStatic:
    def test_the_last_allocation_for_three_intervals_then_the_fallback(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = mock_reporter(server, wall, clock)
        assert reporter.report()
        assert quota.rate("publishMsgs") == 200
        answered = wall()
        server.failing = httpx.ConnectError("connection refused")
        attempts = []
        while quota.rate("publishMsgs") == 200:
            attempts.append(next_report(reporter, wall, clock) - answered)
        # Retried after an interval, then after a backoff of 2 intervals, cut short at the
        # bound, where the server counts it gone: the fallback from then on.
        assert attempts == pytest.approx([1, 3])
        assert quota.rate("publishMsgs") == 500 and reporter.on_fallback
        assert next_report(reporter, wall, clock) - answered == pytest.approx(3 + 4)
        assert quota.rate("publishMsgs") == 500
        server.failing = None
        assert next_report(reporter, wall, clock) - answered == pytest.approx(3 + 4 + 8)
        assert quota.rate("publishMsgs") == 200 and not reporter.on_fallback

    def test_a_newcomer_is_not_stranded_on_its_probe(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        # A newcomer's probe, asked back soon; its lease is a report interval, as a
        # settling reporter's is.
        server.allocation, server.interval_ms = 5, 125
        quota, reporter = mock_reporter(server, wall, clock)
        reporter.report()
        server.failing = 503
        advance(wall, clock, 3 - 0.001)
        reporter.report()
        assert quota.rate("publishMsgs") == 5
        advance(wall, clock, 0.001)
        reporter.report()
        assert quota.rate("publishMsgs") == 500

    def test_a_steady_worker_holds_its_allocation_for_its_lease_and_two_intervals(
        self, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        server = MockServer(interval_ms=8000, lease_ms=8000)
        quota, reporter = mock_reporter(server, wall, clock)
        reporter.report()
        answered = wall()
        server.failing = 503
        attempts = []
        while quota.rate("publishMsgs") == 200:
            attempts.append(next_report(reporter, wall, clock) - answered)
        # At its lease's end, then after a backoff of 2 intervals: the bound.
        assert attempts == pytest.approx([8, 8 + 2])
        assert quota.rate("publishMsgs") == 500

    def test_before_any_answer_on_no_policy_holds(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = mock_reporter(server, wall, clock)
        quota.apply({"publishMsgs": 50})  # as ResourceGroupClient applies a mapping of rates
        server.failing = 503
        for _ in range(5):
            next_report(reporter, wall, clock)
        assert quota.rate("publishMsgs") == 50
        assert reporter.fallback_at() is None


def test_a_stopped_server_moves_workers_to_their_fallback_after_their_lease(
    tmp_path: Path,
) -> None:
    """Against the real server (report interval 0.2 s): a worker holding the whole quota and
    a newcomer on its probe, then the server stops. Each keeps its allocation for its lease
    and 2 intervals (as the worker knows them) after its last answer, then holds its equal
    share of the group; those add up to the quota."""
    wall = FakeClock(time.time())
    clock = FakeMonotonicClock()
    with running_server(tmp_path, report_interval_s=0.2) as (rg, stack):
        job = rg.namespace(publishRateInMsgs=QUOTA)
        quotas = [NamespaceQuota(job.tenant, job.namespace, clock=clock) for _ in range(2)]
        reporters = [
            Reporter(AdminClient(rg.url, token=job.token), [quota], wall_clock=wall)
            for quota in quotas
        ]
        try:
            settled, newcomer = reporters
            quotas[0].use("publish")
            wall.now = time.time()
            assert settled.report()
            for _ in range(30):  # wants far more than the quota: holds all of it
                clock.advance(0.01)
                quotas[0].charge("publish", 100, 0)
            wall.now = time.time()
            assert settled.report()
            assert settled.period_s == pytest.approx(0.2)  # a regular answer: the interval
            last = quotas[0].rate("publishMsgs")
            assert last == pytest.approx(QUOTA)
            quotas[1].use("publish")
            wall.now = time.time()
            assert newcomer.report()
            probe = quotas[1].rate("publishMsgs")
            assert probe is not None and probe <= 0.02 * QUOTA  # nothing free: a probe
            wall.now = time.time()
            assert settled.report()  # its answer now counts the newcomer in its fallback
            last = quotas[0].rate("publishMsgs")
            stack.close()  # the server stops

            for quota, reporter, before in zip(quotas, reporters, (last, probe), strict=True):
                assert reporter.reached_at is not None
                # The newcomer knows only the early interval its answer asked for.
                assert reporter.period_s <= 0.2
                deadline = reporter.reached_at + reporter.lease_s + 2 * reporter.period_s
                assert reporter.fallback_at() == deadline
                wall.now = deadline - 0.001
                assert not reporter.report()
                assert quota.rate("publishMsgs") == before
                wall.now = deadline
                assert not reporter.report()
                assert quota.rate("publishMsgs") == pytest.approx(QUOTA / 2)
        finally:
            for reporter in reporters:
                reporter.admin.close()


def test_a_quota_cut_reaches_a_worker_at_once_whatever_its_report_interval(
    tmp_path: Path,
) -> None:
    with running_server(tmp_path, report_interval_s=30) as (server, _):
        job = server.namespace(publishRateInMsgs=QUOTA)
        quota = NamespaceQuota(job.tenant, job.namespace)
        reporter = Reporter(AdminClient(server.url, token=job.token), [quota])
        try:
            reporter.run_once()
            before = quota.rate("publishMsgs") or 0.0
            reporter.start()
            time.sleep(0.5)  # the watcher holds its long poll
            cut = max(1, int(before / 4))
            assert reporter.due_in(time.time()) > 2, "the next report is not due for a while"

            server.set_rates(job.group, publishRateInMsgs=cut)
            written = time.monotonic()
            while (quota.rate("publishMsgs") or 0.0) > cut and time.monotonic() < written + 10:
                time.sleep(0.01)
            took = time.monotonic() - written
        finally:
            reporter.close()

    assert (quota.rate("publishMsgs") or 0.0) <= cut
    assert took < 1.0, f"the cut was in force {took:.2f} s after it was made"


def test_a_newcomer_reaches_a_steady_worker_at_once_whatever_its_lease(tmp_path: Path) -> None:
    """A worker alone in its group holds the whole quota on a long lease; a second worker
    starts: the group's wake moves, and the first reports and gives up half within a second,
    not when its lease ends. (Their work runs on a fake clock, so that their demands hold
    still and nothing but the wake makes the first report early.)"""
    clock = FakeMonotonicClock()

    def work(quotas: list[NamespaceQuota]) -> None:
        clock.advance(0.01)
        for quota in quotas:
            quota.charge("publish", 20, 0)  # 2,000/s: twice the quota
        time.sleep(0.01)

    with running_server(tmp_path, report_interval_s=0.5) as (server, _):
        job = server.namespace(publishRateInMsgs=QUOTA)
        quotas = [NamespaceQuota(job.tenant, job.namespace, clock=clock) for _ in range(2)]
        reporters = [Reporter(AdminClient(server.url, token=job.token), [q]) for q in quotas]
        steady, newcomer = reporters
        try:
            quotas[0].use("publish")
            steady.start()
            deadline = time.monotonic() + 20
            while steady.lease_s <= steady.period_s and time.monotonic() < deadline:
                work(quotas[:1])
            assert steady.lease_s > 2, "a busy worker alone settles and holds a lease"
            assert quotas[0].rate("publishMsgs") == pytest.approx(QUOTA, rel=0.3)

            quotas[1].use("publish")
            newcomer.start()
            joined = time.monotonic()
            while (quotas[0].rate("publishMsgs") or 0.0) > 0.7 * QUOTA:
                assert time.monotonic() < joined + 10, "the steady worker never gave up a share"
                work(quotas)
            took = time.monotonic() - joined
        finally:
            for reporter in reporters:
                reporter.close()
    assert took < 2.0, f"the steady worker learnt of the newcomer {took:.2f} s after it came"


class TestSayingWhatIsEnforced:
    def test_each_report_says_the_rates_in_force_once_the_server_asks(
        self, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        server = MockServer(allocation=200.0)
        quota, reporter = mock_reporter(server, wall, clock)
        quota.use("publish")
        reporter.run_once()  # the first: no answer yet says the server takes them
        server.allocation = 150.0
        next_report(reporter, wall, clock)
        first, second = (body["namespaces"]["t/ns"] for body in server.reports)
        assert "allocation" not in first["publishMsgs"]
        # The rate its buckets held as it sent the report: the last answer's.
        assert second["publishMsgs"]["allocation"] == 200.0
        assert second["publishBytes"]["allocation"] == -1  # unlimited
        next_report(reporter, wall, clock)
        assert server.reports[-1]["namespaces"]["t/ns"]["publishMsgs"]["allocation"] == 150.0

    def test_a_fall_is_said_at_once_but_never_twice_in_a_row(
        self, server: MockServer, wall: FakeClock, clock: FakeMonotonicClock
    ) -> None:
        quota, reporter = mock_reporter(server, wall, clock)
        quota.use("publish")
        reporter.report()
        assert reporter.due_in(wall()) > 0
        advance(wall, clock, 1)
        server.allocation = 150.0
        reporter.report()
        assert reporter.due_in(wall()) == 0  # the server counts 200 until it hears of 150
        server.allocation = 100.0
        reporter.report()
        assert reporter.due_in(wall()) == pytest.approx(0.125)  # looks again, due in 1 s
        assert server.reports[-1]["namespaces"]["t/ns"]["publishMsgs"]["allocation"] == 150.0
