"""Several limits on one caller, released first in, first out (PIP-322's throttle count and
fair queue)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Iterable, Mapping
from typing import Callable, Union

from ._bucket import TokenBucket, check_amount

__all__ = ["Charges", "Limiter", "Reservation"]

#: What one call charges: how many tokens to take from each bucket, as a mapping or as
#: (bucket, amount) pairs, e.g. ``{group_msgs: rows, group_bytes: nbytes}``.
Charges = Union[Mapping[TokenBucket, float], Iterable[tuple[TokenBucket, float]]]

_Tickets = list[tuple[TokenBucket, int]]


class Reservation:
    """A charge made: how long its caller must still wait, at the buckets' rates now."""

    __slots__ = ("_tickets", "expected")

    def __init__(self, tickets: _Tickets) -> None:
        self._tickets = tickets
        #: Seconds to wait when it was made, at the rates then.
        self.expected = self.remaining()

    def remaining(self) -> float:
        """Seconds until every bucket charged is clear for this caller; 0.0 once it is."""
        # The caller waits for its slowest bucket.
        return max((bucket.seconds_until(ticket) for bucket, ticket in self._tickets), default=0.0)


class Limiter:
    """Holds callers back while any bucket they were charged against is in debt.

    A caller is charged against every bucket that limits it at once (a group's msgs and
    bytes, a local cap) and may go on when all of them are clear. Charging comes first, as in
    PIP-322, because the work is usually done already (a batch was read, a request sent); the
    wait that follows is what holds the long-run rate to each bucket's rate.

    A bucket is clear for a caller once refill has repaid the debt charged to it up to and
    including that caller: `TokenBucket.reserve` takes the caller's amount and returns that
    point as a ticket, and `TokenBucket.seconds_until` says when refill reaches it. What
    later callers charge does not hold an earlier one back, and a newcomer finds the debt
    of everyone before it, so a caller that charged earlier is always released earlier:
    waiting callers leave in the order they came, and a thread that comes back for more
    queues behind the others, so none starves. Each caller sleeps once, until its own turn,
    rather than polling; the wait is re-evaluated after every sleep, so a rate change while
    a caller waits takes effect.

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
        return self.reserve(charges).remaining()

    def reserve(self, charges: Charges) -> Reservation:
        """Charge every bucket; the reservation says how long to wait, when asked."""
        checked = _checked(charges)
        with self._lock:
            return Reservation([(bucket, bucket.reserve(amount)) for bucket, amount in checked])

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


def _checked(charges: Charges) -> list[tuple[TokenBucket, float]]:
    """Every bucket and amount, all checked before any bucket is charged, so that a bad one
    charges nothing."""
    pairs = charges.items() if isinstance(charges, Mapping) else charges
    checked = list(pairs)
    for bucket, amount in checked:
        if not isinstance(bucket, TokenBucket):
            raise TypeError(
                f"charges must map TokenBucket objects to amounts, but one key is a "
                f"{type(bucket).__name__}."
            )
        check_amount(amount, "the amount charged to a bucket")
    return checked
