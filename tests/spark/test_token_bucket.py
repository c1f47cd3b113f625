"""TokenBucket on an injected clock: no test sleeps."""

from __future__ import annotations

import functools
import itertools
import math
import random
import sys
import threading
from fractions import Fraction
from typing import TYPE_CHECKING

import pytest

from rgspark import TokenBucket

if TYPE_CHECKING:
    from conftest import FakeMonotonicClock


class TestRefill:
    def test_starts_full_with_one_second_of_rate(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(250, clock=clock)
        assert bucket.capacity == 250
        assert bucket.tokens == 250

    def test_refills_from_elapsed_time_up_to_the_capacity(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        clock.advance(1)
        assert bucket.tokens == 10
        clock.advance(100)
        assert bucket.tokens == 100
        bucket.consume(30)
        assert bucket.tokens == 70
        clock.advance(0.5)
        assert bucket.tokens == 75

    def test_fractions_of_a_token_carry_over(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(0.3, capacity=1000, initial_tokens=0, clock=clock)
        for _ in range(100_000):
            clock.advance(0.001)
            bucket.contains_tokens()
        assert bucket.tokens == 30

    def test_a_clock_that_does_not_move_adds_nothing(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(1000, initial_tokens=5, clock=clock)
        bucket.consume(5)
        assert bucket.tokens == 0

    def test_uses_the_monotonic_clock_by_default(self) -> None:
        bucket = TokenBucket(5)
        assert 0 < bucket.tokens <= 5


class TestDebt:
    def test_consume_never_rejects_and_goes_negative(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=5, clock=clock)
        bucket.consume(8)
        assert bucket.tokens == -3
        assert not bucket.contains_tokens()

    def test_consume_and_check_is_true_while_the_balance_stays_above_zero(
        self, clock: FakeMonotonicClock
    ) -> None:
        bucket = TokenBucket(10, capacity=10, clock=clock)
        assert bucket.consume_and_check(9)
        assert not bucket.consume_and_check(1)  # exactly 0 is not above 0
        assert bucket.tokens == 0
        assert not bucket.consume_and_check(0)

    def test_fractional_amounts_add_up(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=10, clock=clock)
        for _ in range(10):
            bucket.consume(0.1)
        assert bucket.tokens == 9


class TestThrottlingDuration:
    def test_pulsars_example(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        clock.advance(5)
        bucket.consume(100)
        assert bucket.tokens == -50
        assert bucket.throttling_duration() == 5.1
        clock.advance(5.1)
        assert bucket.throttling_duration() == 0
        assert bucket.tokens == 1

    def test_waits_for_at_least_16_ms_of_rate(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(1000, initial_tokens=0, clock=clock)
        assert bucket.throttling_duration() == 0.016
        assert bucket.throttling_duration(required=100) == 0.1

    def test_is_zero_when_the_balance_is_already_there(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(1000, clock=clock)
        assert bucket.throttling_duration(required=1000) == 0.0

    def test_a_capacity_below_16_ms_of_rate_is_the_target(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(1000, capacity=4, initial_tokens=0, clock=clock)
        assert bucket.throttling_duration() == 0.004

    def test_a_requirement_above_the_capacity_is_refused(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, clock=clock)
        with pytest.raises(ValueError, match=r"required \(101\) exceeds the capacity"):
            bucket.throttling_duration(101)


class TestTickets:
    def test_a_ticket_is_repaid_when_the_debt_up_to_its_call_is(
        self, clock: FakeMonotonicClock
    ) -> None:
        bucket = TokenBucket(10, capacity=10, initial_tokens=0, clock=clock)
        first = bucket.reserve(5)
        second = bucket.reserve(5)
        assert bucket.seconds_until(first) == 0.5
        assert bucket.seconds_until(second) == 1.0
        clock.advance(0.5)
        assert bucket.seconds_until(first) == 0.0
        assert bucket.seconds_until(second) == 0.5
        # Taking more later does not hold an earlier ticket back.
        bucket.consume(100)
        assert bucket.seconds_until(second) == 0.5
        clock.advance(60)  # once repaid, a ticket stays repaid, whatever the balance did
        bucket.consume(1000)
        assert bucket.seconds_until(first) == bucket.seconds_until(second) == 0.0

    def test_a_call_that_leaves_no_debt_waits_for_nothing(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=10, clock=clock)
        assert bucket.seconds_until(bucket.reserve(10)) == 0.0
        assert bucket.tokens == 0
        assert bucket.seconds_until(bucket.reserve(0.5)) == 0.05

    def test_a_rate_change_moves_the_refill_still_owed(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        ticket = bucket.reserve(20)
        clock.advance(1)
        bucket.set_rate(20)
        assert bucket.seconds_until(ticket) == 0.5

    def test_reserve_refuses_bad_amounts_and_takes_nothing(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, clock=clock)
        with pytest.raises(ValueError, match=r"n must not be negative"):
            bucket.reserve(-1)
        assert bucket.tokens == 10


def test_balance_stays_exact_over_100000_steps(clock: FakeMonotonicClock) -> None:
    bucket = TokenBucket(1000, clock=clock)
    for _ in range(100_000):
        clock.advance(0.001)
        bucket.consume(1)
        assert bucket.tokens == 999
    drained = TokenBucket(1000, initial_tokens=0, clock=clock)
    for _ in range(100_000):
        clock.advance(0.001)
        drained.consume(1)
    assert drained.tokens == 0


class TestSetRate:
    def test_keeps_debt(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        bucket.consume(50)
        bucket.set_rate(100)
        assert bucket.tokens == -50
        assert bucket.rate == 100
        assert bucket.capacity == 100
        clock.advance(0.5)
        assert bucket.tokens == 0

    def test_credits_time_before_the_change_at_the_old_rate(
        self, clock: FakeMonotonicClock
    ) -> None:
        bucket = TokenBucket(10, capacity=100, initial_tokens=0, clock=clock)
        clock.advance(2)
        bucket.set_rate(1000, capacity=5000)
        assert bucket.tokens == 20
        clock.advance(1)
        assert bucket.tokens == 1020

    def test_does_not_fill_a_larger_capacity(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, clock=clock)
        bucket.set_rate(10, capacity=1000)
        assert bucket.tokens == 100

    def test_drops_tokens_above_a_smaller_capacity(self, clock: FakeMonotonicClock) -> None:
        bucket = TokenBucket(10, capacity=100, clock=clock)
        bucket.set_rate(10, capacity=5)
        assert bucket.tokens == 5


class TestBadArguments:
    @pytest.mark.parametrize(
        ("rate", "error", "message"),
        [
            (0, ValueError, r"rate must be above 0 tokens per second, but it is 0\."),
            (-5, ValueError, r"rate must be above 0"),
            (math.nan, ValueError, r"rate must be a finite number, not nan\."),
            (math.inf, ValueError, r"rate must be a finite number"),
            (1e-9, ValueError, r"below the smallest rate"),
            (True, TypeError, r"rate must be a real number, not bool\."),
            ("10", TypeError, r"rate must be a real number, not str\."),
            (None, TypeError, r"rate must be a real number, not NoneType\."),
        ],
    )
    def test_rate(self, rate: object, error: type[Exception], message: str) -> None:
        with pytest.raises(error, match=message):
            TokenBucket(rate)  # type: ignore[arg-type]
        bucket = TokenBucket(1)
        with pytest.raises(error, match=message):
            bucket.set_rate(rate)  # type: ignore[arg-type]
        assert bucket.rate == 1

    @pytest.mark.parametrize("capacity", [0, -1, math.nan, math.inf])
    def test_capacity(self, capacity: float) -> None:
        with pytest.raises(ValueError, match=r"^capacity must be"):
            TokenBucket(10, capacity)

    def test_initial_tokens_above_the_capacity(self) -> None:
        with pytest.raises(ValueError, match=r"initial_tokens \(11\) must not exceed"):
            TokenBucket(10, 10, 11)

    def test_initial_debt_is_allowed(self, clock: FakeMonotonicClock) -> None:
        assert TokenBucket(10, 10, -5, clock=clock).tokens == -5

    @pytest.mark.parametrize(
        ("amount", "error", "message"),
        [
            (-1, ValueError, r"n must not be negative, but it is -1\."),
            (-0.5, ValueError, r"n must not be negative"),
            (math.nan, ValueError, r"n must be a finite number"),
            (math.inf, ValueError, r"n must be a finite number"),
            (True, TypeError, r"n must be a real number, not bool\."),
            ("1", TypeError, r"n must be a real number, not str\."),
        ],
    )
    def test_amounts(self, amount: object, error: type[Exception], message: str) -> None:
        bucket = TokenBucket(10)
        for method in (bucket.consume, bucket.consume_and_check):
            with pytest.raises(error, match=message):
                method(amount)  # type: ignore[arg-type]
        with pytest.raises(error, match=message.replace("n must", "required must")):
            bucket.throttling_duration(amount)  # type: ignore[arg-type]
        assert bucket.tokens == 10

    def test_clock(self) -> None:
        with pytest.raises(TypeError, match=r"clock must be a callable"):
            TokenBucket(10, clock=12)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"clock must return nanoseconds as an int"):
            TokenBucket(10, clock=lambda: 1.5)  # type: ignore[arg-type,return-value]


def test_repr() -> None:
    assert repr(TokenBucket(2.5, 10)) == "TokenBucket(rate=2.5, capacity=10.0)"


class _Model:
    """The bucket's specification, applied to every call at once in exact arithmetic."""

    def __init__(self, rate: Fraction, capacity: Fraction, now: int) -> None:
        self.rate, self.capacity, self.balance, self.last = rate, capacity, capacity, now

    def refill(self, now: int) -> None:
        if now > self.last:
            self.balance = min(self.capacity, self.balance + self.rate * (now - self.last) / 10**9)
            self.last = now


@pytest.mark.parametrize(
    ("rate", "capacity"),
    [(100, 50), (10**6, 5), (10**9, 1000)],
    ids=["slow", "refilled-within-a-call", "refilled-between-calls"],
)
def test_matches_the_exact_model_call_by_call(
    clock: FakeMonotonicClock, rate: int, capacity: int
) -> None:
    # The balance must come out exactly as the specification says after any sequence of
    # calls, near the capacity (where refill is cut) and far below it alike.
    rng = random.Random(322)
    bucket = TokenBucket(rate, capacity=capacity, clock=clock)
    model = _Model(Fraction(rate), Fraction(capacity), clock.now_ns)
    for step in range(30_000):
        clock.now_ns += rng.choice([0, 1, 999, 20_000, 1_000_000, 7_000_000, 40_000_000])
        op = rng.random()
        model.refill(clock.now_ns)
        if op < 0.6:
            amount = rng.choice([0, 1, 1, 2, 3, 10])
            bucket.consume(amount)
            model.balance -= amount
        elif op < 0.7:
            bucket.consume(0.25)
            model.balance -= Fraction(1, 4)
        elif op < 0.8:
            model.balance -= 2
            assert bucket.consume_and_check(2) == (model.balance > 0)
        elif op < 0.82:
            new_rate, new_capacity = rng.choice([(rate, capacity), (250.5, 400), (20, 5)])
            bucket.set_rate(new_rate, new_capacity)
            model.rate, model.capacity = Fraction(new_rate), Fraction(new_capacity)
            model.balance = min(model.balance, model.capacity)
        if step % 97 == 0 or op >= 0.98:
            assert bucket.tokens == float(model.balance), step
    model.refill(clock.now_ns)
    assert bucket.tokens == float(model.balance)


class _TickingClock:
    """Moves 1 µs on every reading; next() on a count is atomic, so threads may share it."""

    def __init__(self) -> None:
        self._next = functools.partial(next, itertools.count(0, 1000))
        self.last = 0

    def __call__(self) -> int:
        self.last = self._next()
        return self.last


@pytest.fixture
def tiny_switch_interval() -> object:
    # Switch threads as often as CPython allows, so that every race gets its chance.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("tiny_switch_interval")
def test_eight_threads_lose_no_consumption() -> None:
    clock = _TickingClock()
    bucket = TokenBucket(1000, capacity=1000, initial_tokens=0, clock=clock)
    start = clock.last
    calls = 20_000
    barrier = threading.Barrier(8)

    def hammer(index: int) -> None:
        barrier.wait()
        for i in range(calls):
            # Every path that takes tokens, int and float amounts, racing each other.
            if index == 0 and i % 5 == 0:
                bucket.consume_and_check(1)
            elif index == 1 and i % 5 == 0:
                bucket.consume(1.0)
            elif index == 2 and i % 5 == 0:
                bucket.reserve(1)
            else:
                bucket.consume(1)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tokens = bucket.tokens
    # Refill is 1 token per ms of the ticking clock, far too little to reach the capacity,
    # so the balance is exactly the refill minus every call.
    refill = Fraction(clock.last - start, 10**6)
    assert tokens == float(refill - 8 * calls)
