"""PIP-322's token bucket: refilled from elapsed time, allowed to go into debt."""

from __future__ import annotations

import math
import numbers
import threading
import time
from bisect import bisect_right
from fractions import Fraction
from itertools import accumulate
from operator import add
from typing import Callable

__all__ = ["TokenBucket"]

# The balance is an integer count of units, a token being 10**15 of them: 10**9 nanoseconds
# times 10**6. A rate held in millionths of a token per second then adds a whole number of
# units every nanosecond, so refill is exact integer arithmetic: no float error, and no
# fraction of a token is ever dropped between two refills, however often they happen.
_RATE_STEPS_PER_TOKEN = 10**6
_NS_PER_SECOND = 10**9
_UNITS_PER_TOKEN = _RATE_STEPS_PER_TOKEN * _NS_PER_SECOND

# PIP-322's resolution: a throttled caller waits until the bucket holds at least this much
# refill, so that waking up is worth it; and consume() defers at most this long at a time.
_RESOLUTION_NS = 16_000_000
# Near the capacity, consume() records when each amount was taken (see TokenBucket), and
# folds at least this often so that the records stay few.
_TIMED_WINDOW_NS = 2_000_000


# Float amounts converted before, so that a repeated amount (a fixed cost per message, say)
# costs one lookup instead of an exact conversion. Bounded: past the bound it starts over.
_FLOAT_UNITS: dict[float, int] = {}
_FLOAT_UNITS_MAX = 4096


class TokenBucket:
    """A token bucket whose balance may go negative, refilled from elapsed time.

    The bucket holds at most `capacity` tokens and gains `rate` tokens per second. It starts
    with `initial_tokens` (default: full). Callers `consume` what they used without asking
    first, since work already done cannot be refused, and the balance goes negative when they
    overdraw; a caller is throttled while the balance is not positive, and
    `throttling_duration` says for how long. There is no timer: every call first adds the
    refill for the time elapsed since the previous one, capped at `capacity`.

    Burst maths, for rate ``r`` and capacity ``b`` (default ``b = r``, one second of rate):

    - From full, callers consuming at ``M > r`` tokens per second empty the bucket in
      ``b / (M - r)`` seconds, a burst of ``b * M / (M - r)`` tokens (about ``b`` when
      ``M`` is much larger than ``r``).
    - Over any ``T`` seconds, callers that wait for a positive balance before going on
      consume at most ``b + r * T`` tokens, plus one call's overdraft per caller. So the
      long-run rate is ``r``, and single calls should stay small next to ``r`` (the Spark
      helpers slice work to about 100 ms of rate).
    - ``throttling_duration(required)`` is ``(max(required, 0.016 * r) - balance) / r``:
      time to repay the debt and gain a 16 ms cushion, so that a released caller does not
      wake up for a few tokens' worth of work.

    Pulsar's example holds exactly: ``TokenBucket(10, 100, 0)``, 5 s later
    ``consume(100)`` leaves ``tokens == -50`` and ``throttling_duration() == 5.1``.

    Rates resolve to a millionth of a token per second (a float rate is rounded to that, so
    ``0.1`` is exactly a tenth); amounts and capacities to 10**-15 of a token. Whole-token
    amounts are exact, and repeated refill never drifts.

    `clock` returns monotonic nanoseconds, `time.monotonic_ns` by default; tests inject a
    fake one and never sleep. Every method may be called from any thread.
    """

    # Thread safety. CPython has no compare-and-swap, and the GIL does not make a
    # read-modify-write of several attributes atomic (free-threaded builds have no GIL at
    # all), so the balance only ever changes under `_lock`. But consume() is the hot call, and
    # even an uncontended Lock is a cost it should not pay on every call, so it borrows
    # PIP-322's idea of deferring work without losing any: consume() only appends what it
    # took to a list (list.append is atomic, with or without the GIL), and the next call
    # that takes the lock folds the lists into the balance. Unlike PIP-322 this is
    # exact, not eventually consistent, in both of consume()'s windows:
    #
    # - Before `_fast_until`, the balance cannot reach the capacity even with nothing
    #   consumed, so refill is not cut and the amounts need no time: a fold subtracts their
    #   sum (`_pending` in tokens, `_pending_units` for float amounts).
    # - Near the capacity, up to `_timed_until`, each amount is recorded after its clock
    #   reading in `_timed` (one extend of both, atomic as an append is), and a fold replays
    #   them in order, refill cut by the capacity before each, as if every call had been
    #   applied at once (see `_sync`).
    #
    # A fold takes the first `k` items of each list and deletes exactly those, so an append
    # racing with it lands in the next fold and is never lost; a reading older than the
    # previous fold counts as taken at that fold, which is still within its call.
    __slots__ = (
        "_balance",
        "_capacity",
        "_clock",
        "_credited",
        "_fast_until",
        "_last",
        "_lock",
        "_pending",
        "_pending_append",
        "_pending_units",
        "_pending_units_append",
        "_rate",
        "_timed",
        "_timed_extend",
        "_timed_until",
    )

    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        initial_tokens: float | None = None,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._rate = _rate_steps(rate)
        self._capacity = _capacity_units(capacity, self._rate)
        if initial_tokens is None:
            self._balance = self._capacity
        else:
            self._balance = _units(initial_tokens, "initial_tokens", allow_negative=True)
            if self._balance > self._capacity:
                raise ValueError(
                    f"initial_tokens ({initial_tokens!r}) must not exceed the capacity "
                    f"({self._capacity / _UNITS_PER_TOKEN!r})."
                )
        if clock is None:
            clock = time.monotonic_ns
        elif not callable(clock):
            raise TypeError(
                f"clock must be a callable returning monotonic nanoseconds, not "
                f"{type(clock).__name__}."
            )
        self._clock = clock
        self._last = clock()
        if type(self._last) is not int:
            raise TypeError(
                f"clock must return nanoseconds as an int, but it returned "
                f"{type(self._last).__name__}."
            )
        self._lock = threading.Lock()
        self._credited = 0  # every unit of refill ever added; orders waiting callers
        self._pending: list[int] = []
        self._pending_append = self._pending.append
        self._pending_units: list[int] = []
        self._pending_units_append = self._pending_units.append
        self._timed: list[int] = []  # a clock reading, then an amount in units, and so on
        self._timed_extend = self._timed.extend
        self._reopen(self._last)

    @property
    def rate(self) -> float:
        """Tokens added per second."""
        return self._rate / _RATE_STEPS_PER_TOKEN

    @property
    def capacity(self) -> float:
        """The most tokens the bucket holds."""
        return self._capacity / _UNITS_PER_TOKEN

    @property
    def tokens(self) -> float:
        """The balance now: negative while in debt."""
        with self._lock:
            self._reopen(self._sync())
            return self._balance / _UNITS_PER_TOKEN

    def consume(self, n: float = 1) -> None:
        """Take `n` tokens, even if that drives the balance negative."""
        if type(n) is int and n >= 0:
            now = self._clock()
            if now < self._fast_until:
                self._pending_append(n)
            elif now < self._timed_until:
                self._timed_extend((now, n * _UNITS_PER_TOKEN))
            else:
                self._consume_locked(n * _UNITS_PER_TOKEN)
            return
        units = _amount_units(n, "n")
        now = self._clock()
        if now < self._fast_until:
            self._pending_units_append(units)
        elif now < self._timed_until:
            self._timed_extend((now, units))
        else:
            self._consume_locked(units)

    def consume_and_check(self, n: float = 1) -> bool:
        """Take `n` tokens; true while the balance after that is above 0."""
        units = n * _UNITS_PER_TOKEN if type(n) is int and n >= 0 else _amount_units(n, "n")
        return self._take(units) > 0

    def contains_tokens(self) -> bool:
        """True while the balance is above 0."""
        with self._lock:
            self._reopen(self._sync())
            return self._balance > 0

    def throttling_duration(self, required: float = 1) -> float:
        """Seconds until the balance reaches ``max(required, 16 ms of rate)``; 0 if it has.

        `required` may not exceed the capacity, since the balance never would. If 16 ms of
        rate exceeds a tiny capacity, the target is the capacity.
        """
        units = _units(required, "required")
        with self._lock:
            self._reopen(self._sync())
            if units > self._capacity:
                raise ValueError(
                    f"required ({required!r}) exceeds the capacity "
                    f"({self._capacity / _UNITS_PER_TOKEN!r}), so the balance can never "
                    f"reach it."
                )
            deficit = self._target(units) - self._balance
            rate = self._rate
        if deficit <= 0:
            return 0.0
        return _ceil_div(deficit, rate) / _NS_PER_SECOND

    def set_rate(self, rate: float, capacity: float | None = None) -> None:
        """Change the rate, and the capacity (default: one second of the new rate).

        Refill up to now is credited at the old rate first. Debt is kept, and a larger
        capacity is not filled up: only time adds tokens. A smaller capacity drops the tokens
        above it.
        """
        steps = _rate_steps(rate)
        capacity_units = _capacity_units(capacity, steps)
        with self._lock:
            now = self._sync()
            self._rate = steps
            self._capacity = capacity_units
            self._balance = min(self._balance, capacity_units)
            self._reopen(now)

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate!r}, capacity={self.capacity!r})"

    # The methods below are for Limiter, which charges several buckets and orders the callers
    # it holds back. A ticket is the value `_credited` must reach for the debt owed up to and
    # including a caller's own charge to be repaid, whatever is charged after it. Later
    # callers always hold larger tickets, which makes release first in, first out, and a
    # rate change while a caller waits moves its release by exactly the right amount.

    def _charge(self, units: int) -> int | None:
        """Take `units`; the caller's ticket if that leaves the bucket in debt, else None."""
        with self._lock:
            now = self._sync()
            self._balance -= units
            self._reopen(now)
            if self._balance >= 0:
                return None
            return self._credited - self._balance

    def _take(self, units: int) -> int:
        """Take `units`; the balance left."""
        lock = self._lock
        lock.acquire()
        try:
            now = self._sync()
            balance = self._balance = self._balance - units
            self._reopen(now)
        finally:
            lock.release()
        return balance

    def _ns_until(self, ticket: int) -> int:
        """Nanoseconds until `ticket` is repaid at the current rate; 0 once it is."""
        with self._lock:
            self._reopen(self._sync())
            remaining = ticket - self._credited
            if remaining <= 0:
                return 0
            return _ceil_div(remaining, self._rate)

    def _consume_locked(self, units: int) -> None:
        with self._lock:
            now = self._sync()
            self._balance -= units
            self._reopen(now)

    # The helpers below are called with the lock held.

    def _sync(self) -> int:
        """Fold what consume() recorded into the balance, then add refill up to now."""
        now = self._clock()
        balance = self._balance
        last = self._last
        rate = self._rate
        capacity = self._capacity
        # Amounts taken before `_fast_until` came from a balance that could not reach the
        # capacity before then: taking them at `last` gives the same balance at any later
        # time, and cuts no refill that taking them later would not.
        taken = 0
        pending = self._pending
        count = len(pending)
        if count:
            taken = sum(pending[:count]) * _UNITS_PER_TOKEN
            del pending[:count]
        pending = self._pending_units
        count = len(pending)
        if count:
            taken += sum(pending[:count])
            del pending[:count]
        timed = self._timed
        count = len(timed)
        if count:
            amounts = timed[1:count:2]
            # Replayed in the order they were appended, each no earlier than the one before.
            times = list(accumulate(timed[0:count:2], max, initial=last))
            del timed[:count]
            now = max(now, times[-1])
            start = balance - taken
            total = sum(amounts)
            taken += total
            end = start + (now - last) * rate - total
            if start + (times[-1] - last) * rate > capacity:
                # The capacity may have cut refill before some record j: then the balance
                # now is at most capacity + rate * (now - t_j) - (amounts from j on), and it
                # is the least of those bounds and the uncut one (a min-plus recurrence).
                # Only records less than total / rate old can make that bound the least.
                first = bisect_right(times, now - _ceil_div(total, rate), 1) - 1
                if first < len(amounts):
                    suffix = list(accumulate(reversed(amounts[first:])))
                    suffix.reverse()
                    latest = max(map(add, map(rate.__mul__, times[first + 1 :]), suffix))
                    end = min(end, capacity + rate * now - latest)
        else:
            end = balance - taken + max(now - last, 0) * rate
        end = min(end, capacity)
        # Refill added: the balance's change plus what was taken.
        self._credited += end - balance + taken
        self._balance = end
        if now > last:
            self._last = now
        return now

    def _reopen(self, now: int) -> None:
        """Let consume() skip the lock: without times until the balance could reach the
        capacity, then with them for a while."""
        headroom = self._capacity - self._balance
        fast_until = now + min(_RESOLUTION_NS, headroom // self._rate) if headroom > 0 else now
        self._fast_until = fast_until
        self._timed_until = max(fast_until, now + _TIMED_WINDOW_NS)

    def _target(self, required: int) -> int:
        return max(required, min(self._rate * _RESOLUTION_NS, self._capacity))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _real(value: object, name: str) -> Fraction:
    """`value` as an exact fraction, if it is a finite real number (and not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}.")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {value!r}.")
    if isinstance(value, (numbers.Rational, float)):
        return Fraction(value)
    return Fraction(float(value))


def _units(value: object, name: str, *, allow_negative: bool = False) -> int:
    """A number of tokens as units of the balance, refusing negative amounts."""
    exact: int | Fraction = value if type(value) is int else _real(value, name)
    if exact < 0 and not allow_negative:
        raise ValueError(f"{name} must not be negative, but it is {value!r}.")
    units = round(exact * _UNITS_PER_TOKEN)
    if type(value) is float and exact >= 0:
        if len(_FLOAT_UNITS) >= _FLOAT_UNITS_MAX:
            _FLOAT_UNITS.clear()
        _FLOAT_UNITS[value] = units
    return units


def _amount_units(value: object, name: str) -> int:
    """`_units` of an amount, a float one found in the table of those converted before."""
    units = _FLOAT_UNITS.get(value) if type(value) is float else None
    return _units(value, name) if units is None else units


def _rate_steps(rate: object) -> int:
    """A rate as millionths of a token per second, which is also units per nanosecond."""
    exact = _real(rate, "rate")
    if exact <= 0:
        raise ValueError(f"rate must be above 0 tokens per second, but it is {rate!r}.")
    steps = round(exact * _RATE_STEPS_PER_TOKEN)
    if steps == 0:
        raise ValueError(
            f"rate ({rate!r}) is below the smallest rate a TokenBucket resolves, "
            f"one millionth of a token per second."
        )
    return steps


def _capacity_units(capacity: object, rate_steps: int) -> int:
    if capacity is None:
        return rate_steps * _NS_PER_SECOND
    units = _units(capacity, "capacity", allow_negative=True)
    if units <= 0:
        raise ValueError(f"capacity must be above 0 tokens, but it is {capacity!r}.")
    return units
