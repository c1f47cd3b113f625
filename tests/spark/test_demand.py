"""The demand estimator on an injected clock: usage, demand while throttled, recency."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

import pytest

from rgspark import Limiter, TokenBucket
from rgspark._demand import MAX_FACTOR, DemandEstimator

if TYPE_CHECKING:
    from conftest import FakeMonotonicClock


def run_charged(
    estimator: DemandEstimator,
    clock: FakeMonotonicClock,
    seconds: float,
    *,
    demand: float,
    rate: float,
) -> None:
    """A worker working at `demand` per second, held to `rate`: 10 ms slices, charge after."""
    work = min(demand, rate) * 0.01
    for _ in range(round(seconds * 100)):
        clock.advance(work / demand)
        wait = max(0.01 - work / demand, 0.0) if rate < demand else 0.0
        estimator.record_charged(work, wait)
        clock.advance(wait)


class TestUsageAndDemand:
    def test_unthrottled_demand_is_the_usage(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        run_charged(estimator, clock, 1.0, demand=1000, rate=2000)
        used, elapsed, demand = estimator.report()
        assert (used, elapsed) == (pytest.approx(1000), pytest.approx(1.0))
        assert demand == pytest.approx(1000)

    def test_throttled_demand_adds_what_was_held_back(self, clock: FakeMonotonicClock) -> None:
        # Held to 200 per second while wanting 800: used 200, held back 3/4 of the time.
        estimator = DemandEstimator(clock=clock)
        run_charged(estimator, clock, 1.0, demand=800, rate=200)
        used, _, demand = estimator.report()
        assert used == pytest.approx(200)
        assert demand == pytest.approx(800)

    def test_after_acquire_the_sleep_is_behind(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        for _ in range(100):
            clock.advance(0.0025)  # work 2 units at 800 per second
            clock.advance(0.0075)  # ... then sleep in acquire
            estimator.record_acquired(2, 0.0075)
        assert estimator.report().demand == pytest.approx(800)

    def test_with_the_real_limiter_and_bucket(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(300, capacity=30, initial_tokens=0, clock=clock)
        limiter = Limiter(sleep=clock.sleep)
        estimator = DemandEstimator(clock=clock)
        for _ in range(200):  # a worker that could do 1200 per second
            clock.advance(3 / 1200)
            estimator.record_acquired(3, limiter.acquire({bucket: 3}))
        used, elapsed, demand = estimator.report()
        assert used / elapsed == pytest.approx(300, rel=0.01)
        assert demand == pytest.approx(1200, rel=0.01)

    def test_the_report_starts_a_new_interval(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        run_charged(estimator, clock, 0.5, demand=100, rate=1000)
        estimator.report()
        run_charged(estimator, clock, 0.3, demand=100, rate=1000)
        used, elapsed, _ = estimator.report()
        assert (used, elapsed) == (pytest.approx(30), pytest.approx(0.3))

    def test_peeking_does_not_end_the_interval(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        run_charged(estimator, clock, 0.5, demand=400, rate=100)
        assert estimator.demand() == pytest.approx(400)
        assert estimator.report().used == pytest.approx(50)


class TestRecency:
    def test_a_drop_shows_within_the_recent_window(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        run_charged(estimator, clock, 1.0, demand=800, rate=1000)
        run_charged(estimator, clock, 0.2, demand=100, rate=1000)
        # The interval's average would say 683; what it wants now is 100.
        assert estimator.report().demand == pytest.approx(100)

    def test_a_rise_shows_within_the_recent_window(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        run_charged(estimator, clock, 1.0, demand=100, rate=200)
        run_charged(estimator, clock, 0.2, demand=900, rate=200)
        assert estimator.report().demand == pytest.approx(900)

    def test_work_under_way_is_not_idleness(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        run_charged(estimator, clock, 1.0, demand=1000, rate=2000)
        clock.advance(0.007)  # most of the next slice done, not charged yet
        assert estimator.report().demand == pytest.approx(1000)

    def test_a_whole_window_of_quiet_is_no_demand(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        run_charged(estimator, clock, 1.0, demand=1000, rate=2000)
        clock.advance(0.2)
        assert estimator.report().demand == 0

    def test_waking_is_measured_from_the_first_charge(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        run_charged(estimator, clock, 1.0, demand=800, rate=1000)
        clock.advance(20)
        assert estimator.report().demand == 0
        run_charged(estimator, clock, 0.1, demand=300, rate=1000)
        # Not averaged with the idle time, nor with the charges before it.
        assert estimator.demand() == pytest.approx(300, rel=0.15)
        run_charged(estimator, clock, 0.3, demand=300, rate=1000)
        assert estimator.demand() == pytest.approx(300)

    def test_waking_throttled_shows_its_demand_at_once(self, clock: FakeMonotonicClock) -> None:
        # Idle, then woken at a trickle (the floor an idle reporter keeps): the time it is
        # held back shows the demand, where a window reaching back over the idle time
        # would count that as unheld and say it wants almost nothing.
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        run_charged(estimator, clock, 0.5, demand=100, rate=1000)
        clock.advance(20)
        run_charged(estimator, clock, 0.1, demand=400, rate=5)
        assert estimator.report().demand == pytest.approx(400, rel=0.15)  # + its first slice

    def test_sparse_charges_widen_the_window(self, clock: FakeMonotonicClock) -> None:
        # One charge every 100 ms: a 125 ms window would hold one or two of them.
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        for _ in range(20):
            clock.advance(0.1)
            estimator.record_charged(100)
        for offset in (0.0, 0.03, 0.06, 0.09):
            clock.advance(offset)
            assert estimator.demand() == pytest.approx(1000), offset
            clock.advance(0.1 - offset)
            estimator.record_charged(100)


class TestBounds:
    def test_unknown_until_measured(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(recent_s=0.125, clock=clock)
        assert estimator.report() == (0, 0, math.inf)
        clock.advance(0.05)
        assert estimator.demand() == math.inf
        clock.advance(0.1)
        assert estimator.demand() == 0  # a whole window without a charge: idle

    def test_one_charge_is_a_measurement(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        clock.advance(0.01)
        estimator.record_charged(5)
        assert estimator.demand() == pytest.approx(500)

    def test_held_back_nearly_all_the_time_counts_at_most_max_factor(
        self, clock: FakeMonotonicClock
    ) -> None:
        estimator = DemandEstimator(clock=clock)
        for _ in range(100):
            clock.advance(0.00001)
            estimator.record_charged(1, 0.00999)
            clock.advance(0.00999)
        # It wants 100,000 per second, but is counted as at most 100 times what it got.
        used, elapsed, demand = estimator.report()
        assert 0.9 * MAX_FACTOR * used / elapsed < demand <= MAX_FACTOR * used / elapsed

    def test_concurrent_waits_count_once(self, clock: FakeMonotonicClock) -> None:
        # Two callers held over the same 7.5 ms of every 10 ms, one told to wait it, one
        # saying it slept it: held 3/4 of the time, not 3/2 (which would leave no unheld
        # time, and count as MAX_FACTOR times the usage).
        estimator = DemandEstimator(clock=clock)
        for _ in range(100):
            clock.advance(0.0025)
            estimator.record_charged(1, 0.0075)
            clock.advance(0.0075)
            estimator.record_acquired(1, 0.0075)
        assert estimator.report().demand == pytest.approx(800, rel=0.05)

    def test_no_count_is_lost_between_threads(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)

        def record() -> None:
            for _ in range(10_000):
                estimator.record_charged(1)

        threads = [threading.Thread(target=record) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        clock.advance(1)
        assert estimator.report().used == 40_000

    @pytest.mark.parametrize(("units", "held"), [(-1, 0), (1, -0.5), (math.nan, 0)])
    def test_negative_amounts_are_refused(self, units: float, held: float) -> None:
        estimator = DemandEstimator()
        with pytest.raises(ValueError):
            estimator.record_charged(units, held)
        with pytest.raises(ValueError):
            estimator.record_acquired(units, held)

    @pytest.mark.parametrize("recent_s", [0, -1, math.inf, math.nan])
    def test_the_window_must_be_a_positive_time(self, recent_s: float) -> None:
        with pytest.raises(ValueError):
            DemandEstimator(recent_s=recent_s)


class TestEarlyRelease:
    def test_a_caller_released_early_is_held_no_longer(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        estimator.record_charged(10, wait_s=8.0)  # told to wait 8 s at a trickle
        clock.advance(0.3)
        estimator.released(until_s=7.7)  # its limit rose: it goes on after 0.3 s
        run_charged(estimator, clock, 1.0, demand=1000, rate=2000)
        # Its work since is counted as work: the demand is what it does, not MAX_FACTOR x.
        assert estimator.demand() == pytest.approx(1000, rel=0.05)

    def test_without_the_release_the_work_after_looks_held(self, clock: FakeMonotonicClock) -> None:
        estimator = DemandEstimator(clock=clock)
        estimator.record_charged(10, wait_s=8.0)
        clock.advance(0.3)
        run_charged(estimator, clock, 1.0, demand=1000, rate=2000)
        assert estimator.demand() > 10 * 1000

    def test_another_caller_held_longer_keeps_the_held_time(
        self, clock: FakeMonotonicClock
    ) -> None:
        estimator = DemandEstimator(clock=clock)
        estimator.record_charged(10, wait_s=1.0)
        estimator.record_charged(10, wait_s=2.0)  # in line after the first
        clock.advance(0.5)
        estimator.released(until_s=0.5)  # the first goes on; the second still waits
        clock.advance(1.0)
        estimator.record_charged(10)
        # 1.5 s gone, all of it held (the second caller's wait): the demand is bounded by
        # MAX_FACTOR x usage, as when nobody was released.
        assert estimator.demand() == pytest.approx(MAX_FACTOR * 30 / 1.5, rel=0.05)


def test_a_quota_whose_allocation_rose_during_a_wait_reports_the_work_after(
    clock: FakeMonotonicClock,
) -> None:
    from rgspark._quota import NamespaceQuota

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        if clock() - start >= 300_000_000:  # the worker's share, 0.3 s into the wait
            quota.apply({"publishMsgs": 1_000_000})

    quota = NamespaceQuota("t", "ns", clock=clock, sleep=sleep)
    quota.apply({"publishMsgs": 10})  # a trickle
    start = clock()
    quota.acquire("publish", 200, 0)  # 20 s owed at the trickle
    assert (clock() - start) / 1e9 == pytest.approx(0.3, abs=0.11)
    for _ in range(100):  # then 1,000 msgs/s for a second, held back by nothing
        clock.advance(0.01)
        quota.acquire("publish", 10, 0)
    assert quota.usage()["publishMsgs"]["demand"] == pytest.approx(1000, rel=0.1)
