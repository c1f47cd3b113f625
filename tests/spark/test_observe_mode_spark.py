"""Observe mode on the worker: charged and measured as when enforcing, nobody waits, and what
enforcing would have done is recorded; the answer's mode switches it; and a real PySpark job
runs unthrottled while its group observes, then at the quota from the second after the switch.

Limiter tests run on an injected clock and never sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from benchmarks.observe_mode import batches as logged_batches
from benchmarks.observe_mode import per_second
from rgspark import TokenBucket, throttled
from rgspark._admin import AdminClient
from rgspark._exceptions import ConfigurationError, UnexpectedResponseError
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from rgspark.wire import DIMENSIONS, UNLIMITED_ALLOCATION
from tests.factories import FakeClock
from tests.spark.conftest import FakeMonotonicClock, RGServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALLOCATION = 1000.0  # msgs/s
CHARGE = 100  # rows a charge


def never(seconds: float) -> None:
    raise AssertionError(f"an observed caller slept {seconds} s")


def observed(clock: FakeMonotonicClock) -> NamespaceQuota:
    quota = NamespaceQuota("t", "ns", clock=clock, sleep=never)
    quota.apply({"publishMsgs": ALLOCATION})
    quota.observe(True)
    return quota


def send(quota: NamespaceQuota, clock: FakeMonotonicClock, rate: float, seconds: float) -> None:
    """Charge `CHARGE` rows at a time, at `rate` rows per second, for `seconds`."""
    for _ in range(round(rate * seconds / CHARGE)):
        clock.advance(CHARGE / rate)
        assert quota.acquire("publish", CHARGE, 8 * CHARGE) == 0.0


class TestWouldWait:
    def test_nobody_waits_and_the_wait_enforcing_would_add_is_recorded(
        self, clock: FakeMonotonicClock
    ) -> None:
        quota = observed(clock)
        send(quota, clock, 3 * ALLOCATION, 10)
        # 30,000 rows at 1,000/s take 30 s enforced: 20 s more than the 10 they took.
        assert quota.would_wait_s("publish") == pytest.approx(20, abs=CHARGE / ALLOCATION)
        assert quota.over_allocation("publishMsgs") == pytest.approx(20_000, abs=2 * CHARGE)
        assert quota.would_wait_s("dispatch") == 0.0
        assert quota.over_allocation("publishBytes") == 0.0  # the bytes are unlimited

    def test_the_debt_does_not_grow_so_the_figure_rises_steadily(
        self, clock: FakeMonotonicClock
    ) -> None:
        quota = observed(clock)
        rises = []
        for _ in range(30):
            before = quota.would_wait_s("publish")
            send(quota, clock, 2 * ALLOCATION, 1)
            rises.append(quota.would_wait_s("publish") - before)
        # A second at twice the allocation would take one more second enforced, every
        # second: a debt kept would add the whole backlog's wait to each charge instead.
        assert rises[-1] == pytest.approx(1.0, abs=0.05)
        assert max(rises) - min(rises[1:]) <= 0.11

    def test_below_the_allocation_nothing_would_wait(self, clock: FakeMonotonicClock) -> None:
        quota = observed(clock)
        send(quota, clock, ALLOCATION / 2, 10)
        assert quota.would_wait_s("publish") == 0.0
        assert quota.over_allocation("publishMsgs") == 0.0

    def test_charge_says_no_wait_and_the_rate_is_none(self, clock: FakeMonotonicClock) -> None:
        quota = observed(clock)
        assert quota.charge("publish", 5000, 0) == 0.0
        assert quota.would_wait_s("publish") == pytest.approx(5.0)
        # Nothing held back: the Spark helpers send whole batches, as they do unlimited.
        assert quota.rate("publishMsgs") is None
        quota.observe(False)
        assert quota.rate("publishMsgs") == ALLOCATION

    def test_bad_names_are_refused(self, clock: FakeMonotonicClock) -> None:
        quota = observed(clock)
        with pytest.raises(ConfigurationError, match="kind"):
            quota.would_wait_s("write")
        with pytest.raises(ConfigurationError, match="dimension"):
            quota.over_allocation("publishRows")


class TestSameFiguresAsEnforcing:
    def test_usage_is_what_went_through_and_demand_is_the_same(
        self, clock: FakeMonotonicClock
    ) -> None:
        """The same callers, wanting 3,000 rows/s, observed and enforced: both report a
        demand of about 3,000 (so the server plans alike); the observed one's usage is what
        it really sent."""
        observing = observed(clock)
        enforcing = NamespaceQuota("t", "ns", clock=clock, sleep=clock.sleep)
        enforcing.apply({"publishMsgs": ALLOCATION})
        wanted = 3 * ALLOCATION
        for quota in (observing, enforcing):
            quota.usage()  # the figures start now
            start = clock()
            for _ in range(round(wanted * 5 / CHARGE)):
                clock.advance(CHARGE / wanted)  # the work; enforced, the wait comes on top
                quota.acquire("publish", CHARGE, 0)
            elapsed = (clock() - start) / 1e9
            figures = quota.usage()["publishMsgs"]
            assert figures["demand"] == pytest.approx(wanted, rel=0.1)
            assert figures["used"] / elapsed == pytest.approx(
                wanted if quota is observing else ALLOCATION, rel=0.05
            )


class TestSwitching:
    def test_into_observe_releases_waiting_callers(self, clock: FakeMonotonicClock) -> None:
        quota = NamespaceQuota("t", "ns", clock=clock, sleep=clock.sleep)
        quota.apply({"publishMsgs": ALLOCATION})
        reservation = quota.reserve("publish", 5000, 0)
        assert reservation.remaining() == pytest.approx(5.0)
        quota.observe(True)
        assert reservation.remaining() == 0.0
        assert quota.would_wait_s("publish") == 0.0  # enforcing was in force when it charged

    def test_back_to_enforce_starts_without_a_backlog(self, clock: FakeMonotonicClock) -> None:
        quota = observed(clock)
        send(quota, clock, 10 * ALLOCATION, 5)  # 45 s of backlog, had it been kept
        quota.observe(False)
        clock.advance(CHARGE / ALLOCATION)
        reservation = quota.reserve("publish", CHARGE, 0)
        assert reservation.remaining() <= CHARGE / ALLOCATION

    def test_forgive_clears_the_debt_and_repays_every_ticket(
        self, clock: FakeMonotonicClock
    ) -> None:
        bucket = TokenBucket(10, 1, initial_tokens=0, clock=clock)
        first, second = bucket.reserve(30), bucket.reserve(20)
        assert bucket.seconds_until(second) == pytest.approx(5.0)
        assert bucket.forgive() == pytest.approx(50.0)
        assert (bucket.seconds_until(first), bucket.seconds_until(second)) == (0.0, 0.0)
        assert bucket.tokens == 0.0
        clock.advance(0.05)
        assert bucket.forgive() == 0.0  # not in debt: nothing to forgive, nothing added
        assert bucket.tokens == pytest.approx(0.5)
        assert bucket.seconds_until(bucket.reserve(1.5)) == pytest.approx(0.1)


def answering(modes: list[Any]) -> httpx.MockTransport:
    """Report answers granting 500 msgs/s, each with the next of `modes` (absent for
    `...`); the changes endpoint is not there."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/changes"):
            return httpx.Response(404, json={"reason": "Not Found"})
        rates = {**dict.fromkeys(DIMENSIONS, UNLIMITED_ALLOCATION), "publishMsgs": 500.0}
        part: dict[str, Any] = {
            "resourceGroup": "rg",
            "limits": None,
            "allocations": rates,
            "fallbackAllocations": rates,
        }
        mode = modes.pop(0)
        if mode is not ...:
            part["mode"] = mode
        body = {"accepted": True, "reportIntervalMs": 1000, "namespaces": {"t/ns": part}}
        return httpx.Response(200, content=json.dumps(body).encode())

    return httpx.MockTransport(handle)


def test_the_reporter_follows_the_answers_mode(clock: FakeMonotonicClock) -> None:
    quota = NamespaceQuota("t", "ns", clock=clock, sleep=clock.sleep)
    modes: list[Any] = ["observe", "enforce", "observe", ..., "watch"]
    admin = AdminClient("http://rg.test", transport=answering(modes))
    reporter = Reporter(admin, [quota], wall_clock=FakeClock())
    seen = []
    for _ in range(4):
        reporter.run_once()
        seen.append(quota.observing)
    # An answer without a mode comes from a server without modes: enforce.
    assert seen == [True, False, True, False]
    quota.observe(True)
    # A mode the worker does not know is an answer it cannot use: nothing is applied.
    with pytest.raises(UnexpectedResponseError, match="mode"):
        reporter.run_once()
    assert quota.observing


# ---------------------------------------------------------------------------------------------
# A real job

QUOTA = 5000  # msgs/s: far below what a local job sends unthrottled
OBSERVE_S = 3.0
ENFORCE_S = 3


def count_into(directory: Path) -> Any:
    """A sink for ``mapInArrow`` that logs ``<epoch seconds> <rows>`` per batch it takes."""

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        with (directory / f"{os.getpid()}.log").open("a") as out:
            for batch in batches:
                out.write(f"{time.time()} {batch.num_rows}\n")
                out.flush()
        yield from ()

    return count


@contextlib.contextmanager
def endless(spark: SparkSession, client: Any, directory: Path) -> Iterator[float]:
    """Rows without end into a counting sink `throttled` holds; yields when the first rows
    were counted, and cancels the job when the block ends."""
    df = spark.range(10**12, numPartitions=2)
    job_df = df.mapInArrow(throttled(count_into(directory), client, "publish"), df.schema)

    def run() -> None:
        with contextlib.suppress(Exception):  # cancelled
            job_df.write.format("noop").mode("overwrite").save()

    job = threading.Thread(target=run, daemon=True)
    job.start()
    try:
        deadline = time.monotonic() + 120
        while not logged_batches(directory):
            assert job.is_alive() and time.monotonic() < deadline, "no rows were counted"
            time.sleep(0.05)
        yield logged_batches(directory)[0][0]
    finally:
        spark.sparkContext.cancelAllJobs()
        job.join(timeout=60)


@pytest.mark.spark
def test_a_job_runs_unthrottled_while_observed_then_at_the_quota(
    spark: SparkSession, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=QUOTA)
    rg_server.call("PUT", f"/admin/v2/resourcegroups/{job.group}/mode", {"mode": "observe"})
    with endless(spark, job.client(), tmp_path) as first:
        time.sleep(max(0.0, first + OBSERVE_S - time.time()))
        observing = per_second(logged_batches(tmp_path), first + 1, int(OBSERVE_S) - 1)
        metrics = rg_server.admin.get("/metrics").text
        switched = time.time()
        rg_server.call("PUT", f"/admin/v2/resourcegroups/{job.group}/mode", {"mode": "enforce"})
        time.sleep(ENFORCE_S + 1.5)
    # From a second after the switch, the time DESIGN.md gives a change to reach every
    # worker: the first whole second of the clock may begin a moment after the switch,
    # while workers not yet told still send unheld.
    enforced = per_second(logged_batches(tmp_path), switched + 1.0, ENFORCE_S)
    # Observed, it sends far more than the quota (several times, at the least).
    assert min(observing) > 3 * QUOTA, observing
    assert f'rg_resource_group_observe{{group="{job.group}"}} 1' in metrics
    # Enforced in each of those seconds (generous: a shared machine).
    assert all(abs(rows / QUOTA - 1) <= 0.2 for rows in enforced), enforced
