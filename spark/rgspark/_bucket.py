"""PIP-322's token bucket: refilled from elapsed time, allowed to go into debt."""

from __future__ import annotations

import math
import numbers
import threading
import time
from fractions import Fraction
from typing import Callable

__all__ = ["TokenBucket", "check_amount"]

# The balance is an integer count of units, a token being 10**15 of them: 10**9 nanoseconds
# times 10**6. A rate held in millionths of a token per second then adds a whole number of
# units every nanosecond, so refill is exact integer arithmetic: no float error, and no
# fraction of a token is ever dropped between two refills, however often they happen.
_RATE_STEPS_PER_TOKEN = 10**6
_NS_PER_SECOND = 10**9
_UNITS_PER_TOKEN = _RATE_STEPS_PER_TOKEN * _NS_PER_SECOND

# PIP-322's resolution: a throttled caller waits until the bucket holds at least this much
# refill, so that waking up is worth it.
_RESOLUTION_NS = 16_000_000


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

    Callers that queue behind each other (`rgspark.Limiter`) take tokens with `reserve`,
    which returns a ticket, and ask `seconds_until(ticket)` when their share of the debt is
    repaid: later callers hold later tickets, so they are released later.

    `clock` returns monotonic nanoseconds, `time.monotonic_ns` by default; tests inject a
    fake one and never sleep. Every method may be called from any thread.
    """

    # Thread safety: the balance is read and changed only under `_lock`, on every path. The
    # GIL does not make a read-modify-write of several attributes atomic (and free-threaded
    # builds have no GIL), so without the lock two threads could refill from the same
    # `_last` twice, or both subtract from the same balance and lose a consumption.
    __slots__ = ("_balance", "_capacity", "_clock", "_credited", "_last", "_lock", "_rate")

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
        # Every unit of refill ever added: the scale tickets are counted on. It never
        # goes down, so a ticket once repaid stays repaid.
        self._credited = 0

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
            self._refill()
            return self._balance / _UNITS_PER_TOKEN

    def consume(self, n: float = 1) -> None:
        """Take `n` tokens, even if that drives the balance negative."""
        self._take(_units(n, "n"))

    def consume_and_check(self, n: float = 1) -> bool:
        """Take `n` tokens; true while the balance after that is above 0."""
        balance, _ = self._take(_units(n, "n"))
        return balance > 0

    def contains_tokens(self) -> bool:
        """True while the balance is above 0."""
        with self._lock:
            self._refill()
            return self._balance > 0

    def throttling_duration(self, required: float = 1) -> float:
        """Seconds until the balance reaches ``max(required, 16 ms of rate)``; 0 if it has.

        `required` may not exceed the capacity, since the balance never would. If 16 ms of
        rate exceeds a tiny capacity, the target is the capacity.
        """
        units = _units(required, "required")
        with self._lock:
            self._refill()
            if units > self._capacity:
                raise ValueError(
                    f"required ({required!r}) exceeds the capacity "
                    f"({self._capacity / _UNITS_PER_TOKEN!r}), so the balance can never "
                    f"reach it."
                )
            target = max(units, min(self._rate * _RESOLUTION_NS, self._capacity))
            deficit = target - self._balance
            rate = self._rate
        return _ceil_div(deficit, rate) / _NS_PER_SECOND if deficit > 0 else 0.0

    def set_rate(self, rate: float, capacity: float | None = None) -> None:
        """Change the rate, and the capacity (default: one second of the new rate).

        Refill up to now is credited at the old rate first. Debt is kept, and a larger
        capacity is not filled up: only time adds tokens. A smaller capacity drops the tokens
        above it.
        """
        steps = _rate_steps(rate)
        capacity_units = _capacity_units(capacity, steps)
        with self._lock:
            self._refill()
            self._rate = steps
            self._capacity = capacity_units
            self._balance = min(self._balance, capacity_units)

    def reserve(self, n: float = 1) -> int:
        """Take `n` tokens, as `consume` does; return this call's ticket for `seconds_until`.

        The ticket is how much refill, counted since the bucket was made, repays the debt
        owed up to and including this call, whatever is taken after it.
        """
        balance, credited = self._take(_units(n, "n"))
        return credited - balance  # below what is credited already when not in debt

    def seconds_until(self, ticket: int) -> float:
        """Seconds until refill reaches `ticket` at the rate now; 0.0 once it has.

        Asked again after a `set_rate`, the answer moves by exactly what the new rate
        changes: the refill still owed is kept, not the time.
        """
        with self._lock:
            self._refill()
            owed = ticket - self._credited
            rate = self._rate
        return _ceil_div(owed, rate) / _NS_PER_SECOND if owed > 0 else 0.0

    def forgive(self) -> float:
        """Clear the debt as if its callers had waited it out: the balance back to 0 (never
        above), and every ticket taken so far repaid. Returns the tokens forgiven (0.0 when
        not in debt). What a group in observe mode does after each charge, whose wait is
        recorded rather than slept (`rgspark._quota.NamespaceQuota`)."""
        with self._lock:
            self._refill()
            debt = -self._balance
            if debt <= 0:
                return 0.0
            self._balance = 0
            # Counted as refill, so that every ticket up to now is reached.
            self._credited += debt
        return debt / _UNITS_PER_TOKEN

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate!r}, capacity={self.capacity!r})"

    def _take(self, units: int) -> tuple[int, int]:
        """Take `units`; the balance left and the refill credited so far."""
        with self._lock:
            self._refill()
            self._balance -= units
            return self._balance, self._credited

    def _refill(self) -> None:
        """Add the refill since the last call, capped at the capacity. The lock is held."""
        now = self._clock()
        if now > self._last:  # a clock that stands still, or steps back, adds nothing
            # The balance never exceeds the capacity, so the cap cannot lower it.
            balance = min(self._balance + (now - self._last) * self._rate, self._capacity)
            self._credited += balance - self._balance
            self._balance = balance
            self._last = now


def check_amount(value: object, name: str) -> None:
    """Raise as `TokenBucket.consume` would for `value`, naming it `name`: an amount of
    tokens is a finite real number, not negative (and not a bool)."""
    _units(value, name)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _ratio(value: object, name: str) -> tuple[int, int]:
    """`value` as an exact ratio of integers (the denominator positive), if it is a finite
    real number and not a bool."""
    if type(value) is float and math.isfinite(value):
        return value.as_integer_ratio()  # exact, and far cheaper than a Fraction
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}.")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {value!r}.")
    exact = Fraction(value if isinstance(value, (numbers.Rational, float)) else float(value))
    return exact.numerator, exact.denominator


def _round_div(a: int, b: int) -> int:
    """``a / b`` (``b > 0``) rounded to the nearest integer, ties to even, as `round` does."""
    quotient, remainder = divmod(a, b)
    if 2 * remainder > b or (2 * remainder == b and quotient % 2):
        quotient += 1
    return quotient


def _units(value: object, name: str, *, allow_negative: bool = False) -> int:
    """A number of tokens as units of the balance, refusing negative amounts."""
    numerator, denominator = (value, 1) if type(value) is int else _ratio(value, name)
    if numerator < 0 and not allow_negative:
        raise ValueError(f"{name} must not be negative, but it is {value!r}.")
    return _round_div(numerator * _UNITS_PER_TOKEN, denominator)


def _rate_steps(rate: object) -> int:
    """A rate as millionths of a token per second, which is also units per nanosecond."""
    numerator, denominator = _ratio(rate, "rate")
    if numerator <= 0:
        raise ValueError(f"rate must be above 0 tokens per second, but it is {rate!r}.")
    steps = _round_div(numerator * _RATE_STEPS_PER_TOKEN, denominator)
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
