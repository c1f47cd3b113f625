"""A worker whose reports a busy server sheds (503, ``X-Lease-Kept-Ms``) holds what the server
says it counts of it: its last allocation while the server keeps it counted, never the
fallback then; nothing of its own once the server no longer counts it, until a report of it
is stored. So what shed workers enforce never adds to what the server hands out."""

from __future__ import annotations

import httpx
import pytest

from rgspark._admin import ReportShed, answer_of
from rgspark._exceptions import UnexpectedResponseError
from rgspark._reporter import UNCOUNTED_RATE
from rgspark._schedule import State
from rgspark.wire import KEPT_HEADER
from tests.factories import FakeClock
from tests.spark.conftest import FakeMonotonicClock
from tests.spark.test_reporter_wire import MockServer, advance, mock_reporter, next_report

ALLOCATION, FALLBACK = 200.0, 500.0  # the mock server's


def shed(kept_ms: int) -> httpx.Response:
    reason = {"reason": "Report not stored: it waited over 2 s in line"}
    return httpx.Response(503, json=reason, headers={KEPT_HEADER: str(kept_ms)})


def test_a_shed_answer_says_how_long_the_server_counts_the_worker() -> None:
    with pytest.raises(ReportShed) as kept:
        answer_of(shed(2000), "POST", "/quota/v1/reporters/r/reports")
    assert kept.value.kept_s == 2.0 and kept.value.status_code == 503
    # Any other 503 (the database is down) says nothing of the kind.
    with pytest.raises(UnexpectedResponseError) as down:
        answer_of(httpx.Response(503, json={"reason": "Database unavailable"}), "GET", "/")
    assert not isinstance(down.value, ReportShed)


def test_a_worker_kept_counted_holds_its_allocation_past_its_lease(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """Shed for 20 s by a server that keeps it counted 2 s past each report, the worker holds
    its allocation all along (the fallback would have come at its lease and grace, 3 s), and
    reports again after its backoff, at the latest an interval before each new bound, while
    the server counts it still."""
    server = MockServer(allocation=ALLOCATION, fallback=FALLBACK)
    quota, reporter = mock_reporter(server, wall, clock)
    assert reporter.report()
    start = wall()
    server.failing = shed(2000)
    sent = []
    while wall() - start < 20:
        sent.append(next_report(reporter, wall, clock) - start)
        assert quota.rate("publishMsgs") == ALLOCATION and reporter.schedule.state is State.RETRYING
        bound = reporter.fallback_at()
        assert bound is not None and bound - wall() == pytest.approx(2 + 2)  # kept, then grace
    # Backoffs of 2 s, then 4 and 8 s cut short to the new bounds (7 s, 10 s) less 1 s.
    assert sent[:4] == pytest.approx([1, 3, 6, 9])
    server.failing = None
    next_report(reporter, wall, clock)
    assert reporter.schedule.state is State.ANSWERED and reporter.kept_until is None


def test_a_worker_fallen_back_comes_back_to_its_allocation_when_the_server_keeps_it(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    server = MockServer(allocation=ALLOCATION, fallback=FALLBACK)
    quota, reporter = mock_reporter(server, wall, clock)
    assert reporter.report()
    server.failing = httpx.ConnectError("connection refused")
    while not reporter.on_fallback:
        next_report(reporter, wall, clock)
    assert quota.rate("publishMsgs") == FALLBACK
    server.failing = shed(2000)  # reached again, busy: it counts the worker at its allocation
    next_report(reporter, wall, clock)
    assert quota.rate("publishMsgs") == ALLOCATION and not reporter.on_fallback


def test_a_worker_the_server_no_longer_counts_holds_nothing_until_stored(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """Not counted, the worker holds nothing: not its allocation, which the server handed
    to others, nor its fallback, even once the server cannot be reached at all."""
    server = MockServer(allocation=ALLOCATION, fallback=FALLBACK)
    quota, reporter = mock_reporter(server, wall, clock)
    assert reporter.report()
    server.failing = shed(0)
    next_report(reporter, wall, clock)
    assert quota.rate("publishMsgs") == UNCOUNTED_RATE
    assert reporter.schedule.state is State.UNCOUNTED and reporter.fallback_at() is None
    server.failing = httpx.ConnectError("connection refused")
    for _ in range(3):
        advance(wall, clock, 10)
        next_report(reporter, wall, clock)
        assert quota.rate("publishMsgs") == UNCOUNTED_RATE
    server.failing = None
    next_report(reporter, wall, clock)
    assert quota.rate("publishMsgs") == ALLOCATION and reporter.schedule.state is State.ANSWERED


def test_a_newcomer_shed_before_its_first_answer_holds_what_it_held(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """A shed first report (no answer yet) changes nothing: `on_no_policy` decides."""
    server = MockServer()
    quota, reporter = mock_reporter(server, wall, clock)
    server.failing = shed(0)
    assert not reporter.report()
    assert reporter.schedule.state is State.RETRYING and quota.rate("publishMsgs") is None


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock()
