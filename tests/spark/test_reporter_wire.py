"""The server's answers as the reporter's tests give them: built with the server's own response
model (`app.quota.schemas.ReportResult`), checked here against what the real server answers,
and the answers of an older server (no lease, no report period, no fall to confirm, no
fallback), which workers still understand."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.quota.schemas import NamespaceAllocation, ReportResult
from app.schemas import ResourceGroupRead
from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.factories import FakeClock, create_group, create_namespace, create_tenant
from tests.spark.conftest import FakeMonotonicClock

QUOTA = 1000
GROUP = "rg"
UNLIMITED = {"publishBytes": -1.0, "dispatchMsgs": -1.0, "dispatchBytes": -1.0}
# What a server from before leases, report periods and confirmed falls does not send.
NEWER_FIELDS = {"reportPeriodMs", "leaseMs", "confirmFalls"}

#: How the server fails a report instead of answering it: an exception its transport raises,
#: a status with an error body, an answer given as it is, or a 200 whose JSON is the good
#: answer as edited in place.
Failure = Exception | int | httpx.Response | Callable[[dict[str, Any]], object] | None


class MockServer:
    """``/quota/v1`` answering every report with the same rates, as the server writes them
    (`answer`), until told to fail (`failing`); every report is kept in `reports`."""

    def __init__(
        self,
        allocation: float = 200.0,
        fallback: float = 500.0,
        interval_ms: int = 1000,
        period_ms: int = 1000,
        lease_ms: int | None = None,
    ) -> None:
        self.allocation = allocation
        self.fallback = fallback
        self.interval_ms = interval_ms
        self.period_ms = period_ms
        self.lease_ms = lease_ms  # None: a settling reporter's, the report period
        self.failing: Failure = None
        self.reports: list[dict[str, Any]] = []

    def answer(self, namespaces: list[str]) -> ReportResult:
        """The answer to a report of `namespaces`, as the server's model has it."""
        limits = ResourceGroupRead(
            publishRateInMsgs=QUOTA,
            publishRateInBytes=-1,
            dispatchRateInMsgs=-1,
            dispatchRateInBytes=-1,
            replicationDispatchRateInMsgs=-1,
            replicationDispatchRateInBytes=-1,
        )
        part = NamespaceAllocation(
            resourceGroup=GROUP,
            limits=limits,
            allocations={"publishMsgs": self.allocation, **UNLIMITED},
            fallbackAllocations={"publishMsgs": self.fallback, **UNLIMITED},
        )
        return ReportResult(
            accepted=True,
            reportIntervalMs=self.interval_ms,
            reportPeriodMs=self.period_ms,
            leaseMs=self.period_ms if self.lease_ms is None else self.lease_ms,
            confirmFalls=True,
            namespaces=dict.fromkeys(namespaces, part),
        )

    def json(self, answer: ReportResult) -> dict[str, Any]:
        return answer.model_dump(mode="json")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        failing = self.failing
        if isinstance(failing, Exception):
            raise failing  # the report never arrives
        if request.method == "POST":
            self.reports.append(json.loads(request.content))
        if isinstance(failing, int):
            return httpx.Response(failing, json={"reason": "Database unavailable"})
        if isinstance(failing, httpx.Response):
            return httpx.Response(
                failing.status_code, headers=failing.headers, content=failing.content
            )
        if request.method == "DELETE":
            return httpx.Response(204)
        answer = self.json(self.answer(list(self.reports[-1]["namespaces"])))
        if failing is not None:
            failing(answer)
        # Python's JSON allows NaN, which JSON does not: an answer no server should give.
        return httpx.Response(
            200, content=json.dumps(answer), headers={"Content-Type": "application/json"}
        )


class OlderServer(MockServer):
    """A server from before leases, report periods, confirmed falls and fallbacks."""

    def json(self, answer: ReportResult) -> dict[str, Any]:
        return answer.model_dump(
            mode="json",
            exclude={
                "namespaces": {"__all__": {"fallbackAllocations"}},
                **dict.fromkeys(NEWER_FIELDS, True),
            },
        )


def mock_reporter(
    server: MockServer, wall: FakeClock, clock: FakeMonotonicClock, **options: Any
) -> tuple[NamespaceQuota, Reporter]:
    """A worker's quota of ``t/ns`` and its reporter, on fake time, against `server`."""
    quota = NamespaceQuota("t", "ns", clock=clock, sleep=clock.sleep)
    admin = AdminClient("http://rg.test", transport=httpx.MockTransport(server))
    return quota, Reporter(admin, [quota], wall_clock=wall, **options)


def advance(wall: FakeClock, clock: FakeMonotonicClock, seconds: float) -> None:
    wall.advance(seconds)
    clock.advance(seconds)


def next_report(reporter: Reporter, wall: FakeClock, clock: FakeMonotonicClock) -> float:
    """Wait as the reporter thread does until a report is due, send it; returns when."""
    while (seconds := reporter.due_in(wall())) > 0:
        advance(wall, clock, seconds)
    reporter.report()
    return wall()


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock()


def shape(value: Any) -> Any:
    """What a JSON value is made of: its objects' keys, down to the kind of each leaf."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def test_the_mock_answers_as_the_real_server_does(
    client: TestClient, token: Callable[[str], str]
) -> None:
    """The same report to the real server (in-process) and to `MockServer`: the two answers
    have the same fields, at every level, of the same kinds. A field the server adds, drops
    or renames, in its model or in the JSON it writes, fails here before it fails a worker."""
    create_group(client, GROUP, publishRateInMsgs=QUOTA)
    create_tenant(client, "t")
    create_namespace(client, "t/ns", group=GROUP, producers=["job"])
    quota = NamespaceQuota("t", "ns")
    quota.use("publish")
    reporter = Reporter(AdminClient("http://rg.test"), [quota])
    body = reporter.request(time.time())
    reporter.admin.close()
    path = "/quota/v1/reporters/wire/reports"
    real = client.post(path, json=body, headers={"Authorization": f"Bearer {token('job')}"})
    assert real.status_code == 200, real.text
    mock = MockServer()(httpx.Request("POST", f"http://rg.test{path}", json=body))
    assert shape(mock.json()) == shape(real.json())


def test_an_older_server_s_answers_are_understood(
    wall: FakeClock, clock: FakeMonotonicClock
) -> None:
    """An answer without ``reportPeriodMs``, ``leaseMs``, ``confirmFalls`` and
    ``fallbackAllocations``: the report interval is the longest wait its answers asked for,
    the lease one interval, reports never say what the buckets enforce (it would refuse
    them), and past the bound the last allocation stays."""
    server = OlderServer(interval_ms=125)
    quota, reporter = mock_reporter(server, wall, clock)
    quota.use("publish")
    reporter.report()
    assert (reporter.period_s, reporter.lease_s) == (0.125, 0.125)
    server.interval_ms = 1000
    next_report(reporter, wall, clock)
    server.interval_ms, server.allocation = 125, 150.0  # a fall: no report at once to say so
    next_report(reporter, wall, clock)
    assert (reporter.period_s, reporter.lease_s) == (1.0, 1.0)
    assert reporter.due_in(wall()) == pytest.approx(0.125)
    assert reporter.fallback_at() == pytest.approx(wall() + 3)
    assert all(
        "allocation" not in figures
        for body in server.reports
        for figures in body["namespaces"]["t/ns"].values()
    )
    server.failing = 503
    advance(wall, clock, 10)
    assert not reporter.report()
    assert not reporter.report()
    assert quota.rate("publishMsgs") == 150.0 and reporter.on_fallback
