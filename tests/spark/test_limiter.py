"""Limiter: several buckets on one caller, FIFO release; fake time throughout."""

from __future__ import annotations

import asyncio
import heapq
import threading
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from rgspark import Limiter, TokenBucket

if TYPE_CHECKING:
    from conftest import FakeMonotonicClock


class TestCharge:
    def test_no_wait_while_every_bucket_stays_positive(self, clock: FakeMonotonicClock) -> None:
        msgs = TokenBucket(10, clock=clock)
        nbytes = TokenBucket(1000, clock=clock)
        assert Limiter().charge({msgs: 1, nbytes: 100}) == 0.0
        assert msgs.tokens == 9
        assert nbytes.tokens == 900

    def test_waits_for_the_slowest_bucket_in_debt(self, clock: FakeMonotonicClock) -> None:
        msgs = TokenBucket(10, clock=clock)
        nbytes = TokenBucket(1000, clock=clock)
        # msgs stays positive; bytes owes 1000, repaid in 1 s.
        assert Limiter().charge([(msgs, 1), (nbytes, 2000)]) == 1.0
        assert nbytes.tokens == -1000

    def test_later_callers_wait_longer(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=10, initial_tokens=0, clock=clock)
        limiter = Limiter()
        waits = [limiter.charge({bucket: 1}) for _ in range(5)]
        assert waits == [0.1, 0.2, 0.3, 0.4, 0.5]

    def test_a_newcomer_queues_behind_the_debt_before_it(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=10, initial_tokens=0, clock=clock)
        limiter = Limiter()
        assert limiter.charge({bucket: 10}) == 1.0
        clock.advance(0.95)
        # 0.5 tokens are still owed, so a small charge now is released after the first.
        assert limiter.charge({bucket: 0.1}) == 0.06

    def test_charges_nothing_when_an_amount_is_bad(self, clock: FakeMonotonicClock) -> None:
        first = TokenBucket(10, clock=clock)
        second = TokenBucket(10, clock=clock)
        with pytest.raises(ValueError, match="must not be negative"):
            Limiter().charge({first: 1, second: -1})
        assert first.tokens == second.tokens == 10

    def test_refuses_what_is_not_a_bucket(self) -> None:
        with pytest.raises(TypeError, match="must map TokenBucket objects to amounts"):
            Limiter().charge({"msgs": 1})  # type: ignore[dict-item]

    def test_nothing_to_charge(self) -> None:
        assert Limiter().charge({}) == 0.0


class TestAcquire:
    def test_sleeps_until_every_bucket_is_clear(self, clock: FakeMonotonicClock) -> None:
        msgs = TokenBucket(10, capacity=10, initial_tokens=0, clock=clock)
        nbytes = TokenBucket(1000, clock=clock)
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            clock.sleep(seconds)

        limiter = Limiter(sleep=sleep)
        assert limiter.acquire({msgs: 5, nbytes: 10}) == 0.5
        assert slept == [0.5]
        assert msgs.tokens == 0
        assert limiter.acquire({nbytes: 10}) == 0.0

    def test_a_rate_change_while_waiting_moves_the_release(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            if len(slept) == 1:
                # One second into the wait, the group's share doubles.
                clock.advance(1)
                bucket.set_rate(20)
            else:
                clock.sleep(seconds)

        Limiter(sleep=sleep).acquire({bucket: 20})
        # 10 of the 20 owed are repaid at 10/s, the other 10 at 20/s.
        assert slept == [2.0, 0.5]
        assert bucket.tokens == 0

    def test_asyncio(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(100, capacity=100, initial_tokens=0, clock=clock)

        async def sleep(seconds: float) -> None:
            clock.sleep(seconds)

        limiter = Limiter(async_sleep=sleep)

        async def main() -> list[float]:
            return [await limiter.acquire_async({bucket: 50}) for _ in range(2)]

        assert asyncio.run(main()) == [0.5, 0.5]

    def test_asyncio_needs_no_sleep_while_clear(self) -> None:
        bucket = TokenBucket(100)
        assert asyncio.run(Limiter().acquire_async({bucket: 1})) == 0.0


class VirtualTime:
    """A clock and a sleep for threads: time jumps to the next wake-up once all are asleep.

    Real threads contend as they would in production, but no time passes unless every one
    of them is waiting, so the test is exact, fast and never sleeps.
    """

    def __init__(self, threads: int) -> None:
        self.now_ns = 0
        self._awake = threads
        self._wakeups: list[int] = []
        self._changed = threading.Condition()

    def clock(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        with self._changed:
            wakeup = self.now_ns + round(seconds * 1e9)
            heapq.heappush(self._wakeups, wakeup)
            self._awake -= 1
            self._advance()
            self._changed.wait_for(lambda: self.now_ns >= wakeup)

    def leave(self) -> None:
        with self._changed:
            self._awake -= 1
            self._advance()

    def _advance(self) -> None:
        if self._awake or not self._wakeups:
            return
        self.now_ns = max(self.now_ns, self._wakeups[0])
        # Sleepers due now count as awake at once, so time cannot move on before they run.
        while self._wakeups and self._wakeups[0] <= self.now_ns:
            heapq.heappop(self._wakeups)
            self._awake += 1
        self._changed.notify_all()


def test_contending_threads_get_equal_shares_in_fifo_order() -> None:
    threads = 8
    time = VirtualTime(threads)
    bucket = TokenBucket(100, capacity=1, initial_tokens=0, clock=time.clock)
    limiter = Limiter(sleep=time.sleep)
    releases: list[int] = []
    end_ns = 20 * 10**9

    def work(index: int) -> None:
        try:
            while time.now_ns < end_ns:
                limiter.acquire({bucket: 1})
                releases.append(index)  # list.append is atomic
        finally:
            time.leave()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers)

    shares = Counter(releases)
    assert len(shares) == threads
    assert max(shares.values()) <= 1.1 * min(shares.values())
    # The group's rate holds: 100/s for 20 s, give or take the callers still in flight.
    assert abs(len(releases) - 2000) <= threads
    # First in, first out: once all have queued, every thread leaves once in each turn.
    steady = releases[threads:-threads]
    for turn in range(0, len(steady) - threads, threads):
        assert len(set(steady[turn : turn + threads])) == threads, turn
