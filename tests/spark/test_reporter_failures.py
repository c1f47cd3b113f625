"""A worker never stops enforcing or reporting because of what a server answered: an answer it
cannot use is no answer (logged once per streak, fail-static, the next good answer resumes),
and neither the reporter thread nor the watcher of changes ends on one, nor on a bug."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from rgspark._schedule import Nudge
from tests.factories import FakeClock
from tests.spark.conftest import FakeMonotonicClock
from tests.spark.test_reporter_wire import Failure, MockServer, advance, next_report

BUGGY_RATE = 300.0


class BuggyQuota(NamespaceQuota):
    """A namespace's quota with bugs: applying `BUGGY_RATE` raises, and so does asking
    whether its demand moved while `broken`."""

    def __init__(self, clock: FakeMonotonicClock) -> None:
        super().__init__("t", "ns", clock=clock, sleep=clock.sleep)
        self.broken = False

    def apply(self, allocations: Mapping[str, float]) -> bool:
        if allocations.get("publishMsgs") == BUGGY_RATE:
            raise RuntimeError("a bug in applying an answer")
        return super().apply(allocations)

    def demand_moved(self, *args: Any, **kwargs: Any) -> bool:
        if self.broken:
            raise RuntimeError("a bug in looking at the demand")
        return super().demand_moved(*args, **kwargs)


def edit(change: Callable[[dict[str, Any]], object]) -> Callable[[MockServer], None]:
    """A server whose answers, in the server's JSON otherwise, are changed by `change`."""

    def failing(server: MockServer) -> None:
        server.failing = change

    return failing


def answering(failure: Failure) -> Callable[[MockServer], None]:
    def failing(server: MockServer) -> None:
        server.failing = failure

    return failing


def allocation(rate: float, field: str = "allocations") -> Callable[[MockServer], None]:
    return edit(lambda answer: answer["namespaces"]["t/ns"][field].update(publishMsgs=rate))


def the_bug(server: MockServer) -> None:
    server.allocation = BUGGY_RATE


FAILURES: dict[str, Callable[[MockServer], None]] = {
    # What a server that fails does: the rule every other line must follow.
    "no connection": answering(httpx.ConnectError("connection refused")),
    "a 503": answering(503),
    # Answers a worker cannot use.
    "not JSON": answering(httpx.Response(200, content=b'{"accepted": true, "namesp')),
    "an HTML page": answering(httpx.Response(200, html="<html><body>Sign in</body></html>")),
    "a JSON list": answering(httpx.Response(200, json=[])),
    "no allocations": edit(lambda answer: answer["namespaces"]["t/ns"].pop("allocations")),
    "no reportIntervalMs": edit(lambda answer: answer.pop("reportIntervalMs")),
    "not the namespace reported": edit(lambda answer: answer.update(namespaces={})),
    "a dimension missing": edit(
        lambda answer: answer["namespaces"]["t/ns"]["allocations"].pop("dispatchBytes")
    ),
    "a NaN allocation": allocation(math.nan),
    "an infinite allocation": allocation(math.inf),
    "a negative allocation": allocation(-5.0),
    "a zero allocation": allocation(0.0),
    "a tiny allocation": allocation(1e-9),
    "a string for an allocation": edit(
        lambda answer: answer["namespaces"]["t/ns"]["allocations"].update(publishMsgs="200")
    ),
    "a NaN fallback": allocation(math.nan, "fallbackAllocations"),
    "a bug as it is applied": the_bug,
}


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock()


def buggy_reporter(
    server: MockServer, wall: FakeClock, clock: FakeMonotonicClock, **options: Any
) -> tuple[BuggyQuota, Reporter]:
    quota = BuggyQuota(clock)
    admin = AdminClient("http://rg.test", transport=httpx.MockTransport(server))
    return quota, Reporter(admin, [quota], wall_clock=wall, **options)


def failed_reports(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.levelno >= logging.WARNING and "report failed" in record.getMessage()
    ]


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failure_of_any_kind_is_fail_static_and_logged_once(
    failure: str,
    wall: FakeClock,
    clock: FakeMonotonicClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = MockServer()
    quota, reporter = buggy_reporter(server, wall, clock)
    assert reporter.report()
    answered = wall()
    FAILURES[failure](server)
    attempts = []
    with caplog.at_level(logging.DEBUG, logger="rgspark"):
        while quota.rate("publishMsgs") == 200:
            attempts.append(next_report(reporter, wall, clock) - answered)
            assert len(attempts) < 5, "never fell back"
        # Retried after an interval, then after a backoff of 2 intervals, cut short at the
        # bound, where the server counts it gone: the fallback from then on.
        assert attempts == pytest.approx([1, 3])
        assert quota.rate("publishMsgs") == 500 and reporter.on_fallback
        server.failing, server.allocation = None, 200.0
        assert next_report(reporter, wall, clock) - answered == pytest.approx(3 + 4)
        assert quota.rate("publishMsgs") == 200 and not reporter.on_fallback
        (logged,) = failed_reports(caplog)  # two failed reports, one line
        assert reporter.reporter_id in logged.getMessage()
        # A traceback for a bug, none for what a server answered.
        assert (logged.exc_info is not None) == (failure == "a bug as it is applied")

        FAILURES[failure](server)  # a second streak: logged again
        next_report(reporter, wall, clock)
        assert len(failed_reports(caplog)) == 2


def test_an_answer_it_cannot_use_changes_nothing(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """An answer rejected for its last namespace leaves the first alone: it is checked
    whole before any of it applies."""
    server = MockServer()
    first, second = (NamespaceQuota("t", ns, clock=clock) for ns in ("ns", "other"))
    admin = AdminClient("http://rg.test", transport=httpx.MockTransport(server))
    reporter = Reporter(admin, [first, second], wall_clock=wall)
    assert reporter.report()
    lease = reporter.fallback_at()

    def cut_but_spoil_the_last(answer: dict[str, Any]) -> None:
        answer["namespaces"]["t/ns"]["allocations"]["publishMsgs"] = 100.0
        answer["namespaces"]["t/other"]["allocations"]["publishMsgs"] = -5.0

    server.failing = cut_but_spoil_the_last
    advance(wall, clock, 1)
    assert not reporter.report()
    assert first.rate("publishMsgs") == second.rate("publishMsgs") == 200
    assert reporter.fallback_at() == lease  # no lease renewed either


def test_the_reporter_thread_outlives_bad_answers_and_its_own_bugs(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """The reporter thread's loop on fake time: HTML answers from 2 s to 6 s, then a bug in
    deciding when to report from 8 s to 10 s. Reports back off, fall back and resume after
    each, as after a server error."""
    server = MockServer()
    html = httpx.Response(200, html="<html>Bad gateway</html>")
    reporter: Reporter

    def sleep(seconds: float) -> None:
        advance(wall, clock, seconds)
        now = wall() - start
        server.failing = html if 2 <= now < 6 else None
        quota.broken = 8 <= now < 10
        if now >= 14:
            reporter.close()

    start = wall()
    quota, reporter = buggy_reporter(server, wall, clock, sleep=sleep)
    reporter._run()
    sent = [body["sentAtMs"] / 1000 - start for body in server.reports]
    # 2 and 4 answered with HTML (4 is the bound: the fallback); 8 answered, and at once
    # again to say the fall from the fallback applies; at 8.125 the bug, a backoff of 2
    # intervals, and reports again from 10.125.
    assert sent == pytest.approx([0, 1, 2, 4, 8, 8, 10.125, 11.125, 12.125, 13.125])
    assert quota.rate("publishMsgs") == 200 and not reporter.on_fallback


def test_the_watcher_outlives_answers_it_cannot_use(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """The long poll answered with HTML, with no generation, then raising a bug: each is
    retried after a backoff that doubles from 2 report intervals (no spinning); the next
    good answers are watched as ever."""
    server = MockServer(period_ms=100)
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        advance(wall, clock, seconds)

    _, reporter = buggy_reporter(server, wall, clock, sleep=sleep)
    reporter.report()  # its group is the one to watch
    answers: list[httpx.Response | Exception] = [
        httpx.Response(200, html="<html>Sign in</html>"),
        httpx.Response(200, json={"groups": {"rg": 1}}),
        RuntimeError("a bug in the transport"),
        httpx.Response(200, json={"generation": 1, "groups": {"rg": 1}}),
        httpx.Response(200, json={"generation": 2, "groups": {"rg": 1}}),  # a change
    ]
    polls = []

    def changes(request: httpx.Request) -> httpx.Response:
        polls.append(request.url.params.get_list("group"))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if not answers:
            reporter._stop.set()  # ends the watch once this answer is taken
        return answer

    reporter._watch(AdminClient("http://rg.test", transport=httpx.MockTransport(changes)))
    assert pauses == pytest.approx([0.2, 0.4, 0.8])
    assert polls[-1] == ["1:rg"]  # it watches from what it saw
    assert reporter.schedule.nudged is Nudge.NOW  # and tells the reporter of the change
