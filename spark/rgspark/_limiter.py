"""Several limits on one caller, released first in, first out (PIP-322's throttle count and
fair queue)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Iterable, Mapping
from typing import Callable, Union

from ._bucket import _UNITS_PER_TOKEN, TokenBucket, _amount_units, _ceil_div

__all__ = ["Charges", "Limiter", "Reservation"]

#: What one call charges: how many tokens to take from each bucket, as a mapping or as
#: (bucket, amount) pairs, e.g. ``{group_msgs: rows, group_bytes: nbytes}``.
Charges = Union[Mapping[TokenBucket, float], Iterable[tuple[TokenBucket, float]]]

_Tickets = list[tuple[TokenBucket, int]]


class Reservation:
    """A charge made: how long its caller must still wait, at the buckets' rates now."""

    __slots__ = ("_tickets",)

    def __init__(self, tickets: _Tickets) -> None:
        self._tickets = tickets

    def remaining(self) -> float:
        """Seconds until every bucket charged is clear for this caller; 0.0 once it is."""
        return _wait_ns(self._tickets) / 1e9


class Limiter:
    """Holds callers back while any bucket they were charged against is in debt.

    A caller is charged against every bucket that limits it at once (a group's msgs and
    bytes, a local cap) and may go on when all of them are clear. Charging comes first, as in
    PIP-322, because the work is usually done already (a batch was read, a request sent); the
    wait that follows is what holds the long-run rate to each bucket's rate.

    A bucket is clear for a caller once refill has repaid the debt charged to it up to and
    including that caller. What later callers charge does not hold an earlier one back, and
    a newcomer finds the debt of everyone before it, so a caller that charged earlier is
    always released earlier: waiting callers leave in the order they came, and a thread that
    comes back for more queues behind the others, so none starves. Each caller sleeps once,
    until its own turn, rather than polling; the wait is re-evaluated after every sleep, so
    a rate change while a caller waits takes effect.

    Four ways to wait:

    - `acquire` charges, then sleeps until clear (with `sleep`, `time.sleep` by default;
      tests inject one driven by a fake clock);
    - `charge` charges and returns the seconds to wait without sleeping, for callers that
      run their own loop;
    - `acquire_async` is `acquire` for asyncio (with `async_sleep`, `asyncio.sleep` by
      default);
    - `reserve` charges and returns a `Reservation` that tells the time left whenever asked.

    With `max_sleep_s`, a waiting caller wakes at least that often to re-evaluate its wait,
    so that a rate raised while it sleeps releases it early.

    Buckets may be shared by several limiters; each charge is counted wherever it happens.
    """

    __slots__ = ("_async_sleep", "_lock", "_max_sleep_s", "_sleep")

    def __init__(
        self,
        *,
        sleep: Callable[[float], object] | None = None,
        async_sleep: Callable[[float], Awaitable[object]] | None = None,
        max_sleep_s: float | None = None,
    ) -> None:
        if max_sleep_s is not None and not max_sleep_s > 0:
            raise ValueError(f"max_sleep_s must be above 0 seconds, not {max_sleep_s!r}.")
        self._max_sleep_s = max_sleep_s
        self._sleep: Callable[[float], object] = time.sleep if sleep is None else sleep
        self._async_sleep = async_sleep
        # Charging several buckets is made one step, so that two callers are charged in the
        # same order on every bucket and their release order is the same on all of them.
        self._lock = threading.Lock()

    def charge(self, charges: Charges) -> float:
        """Charge every bucket; return the seconds to wait before going on (0.0 if none)."""
        # `reserve(charges).remaining()` in one step: right after its charge, a caller's
        # ticket is repaid once the bucket's debt is, so no ticket is needed.
        checked = _checked(charges)
        wait_ns = 0
        lock = self._lock
        lock.acquire()
        try:
            for bucket, units in checked:
                balance = bucket._take(units)
                if balance < 0:
                    wait_ns = max(wait_ns, _ceil_div(-balance, bucket._rate))
        finally:
            lock.release()
        return wait_ns / 1e9

    def reserve(self, charges: Charges) -> Reservation:
        """Charge every bucket; the reservation says how long to wait, when asked."""
        return Reservation(self._charge(charges))

    def acquire(self, charges: Charges) -> float:
        """Charge every bucket, then sleep until all are clear; return the seconds slept."""
        reservation = self.reserve(charges)
        waited = 0.0
        while True:
            seconds = self._next_sleep(reservation)
            if not seconds:
                return waited
            self._sleep(seconds)
            waited += seconds

    async def acquire_async(self, charges: Charges) -> float:
        """`acquire` for asyncio: charge, then await until all are clear."""
        sleep = self._async_sleep
        if sleep is None:
            import asyncio  # only asyncio users pay for importing it

            sleep = asyncio.sleep
        reservation = self.reserve(charges)
        waited = 0.0
        while True:
            seconds = self._next_sleep(reservation)
            if not seconds:
                return waited
            await sleep(seconds)
            waited += seconds

    def _next_sleep(self, reservation: Reservation) -> float:
        seconds = reservation.remaining()
        if self._max_sleep_s is not None:
            return min(seconds, self._max_sleep_s)
        return seconds

    def _charge(self, charges: Charges) -> _Tickets:
        checked = _checked(charges)
        tickets: _Tickets = []
        with self._lock:
            for bucket, units in checked:
                ticket = bucket._charge(units)
                if ticket is not None:
                    tickets.append((bucket, ticket))
        return tickets


def _checked(charges: Charges) -> list[tuple[TokenBucket, int]]:
    """Every bucket and amount in units, all checked before any bucket is charged, so that a
    bad one charges nothing."""
    pairs = charges.items() if type(charges) is dict or isinstance(charges, Mapping) else charges
    checked: list[tuple[TokenBucket, int]] = []
    for bucket, amount in pairs:
        if type(bucket) is not TokenBucket and not isinstance(bucket, TokenBucket):
            raise TypeError(
                f"charges must map TokenBucket objects to amounts, but one key is a "
                f"{type(bucket).__name__}."
            )
        if type(amount) is int and amount >= 0:
            checked.append((bucket, amount * _UNITS_PER_TOKEN))
        else:
            checked.append((bucket, _amount_units(amount, "the amount charged to a bucket")))
    return checked


def _wait_ns(tickets: _Tickets) -> int:
    """Nanoseconds until every ticket is repaid: the caller waits for its slowest bucket."""
    return max((bucket._ns_until(ticket) for bucket, ticket in tickets), default=0)
