"""A namespace's share of a group, in one worker: a bucket per dimension and a demand estimator.

Callers charge what they did through `NamespaceQuota.acquire` (or `charge`, to wait themselves);
the worker's `rgspark._reporter.Reporter` reads its usage and demand for each report and sets
each bucket to the allocation the answer carries (`NamespaceQuota.apply`).

Idle is known: a kind of traffic announced (`NamespaceQuota.use`, a task starting) has an
unknown demand, which the server reads as "owed a fair share", only until it is charged or a
quarter of the report interval (`CLAIM`) has passed; then it reports what the estimator
measured, 0 when nothing was charged, and holds only the floor.

Observe mode (a group's ``mode`` in the answer: `NamespaceQuota.observe`). Callers are
charged and measured exactly as when enforcing, so the reports, and the allocations the
server plans from them, are the same; but no caller waits. Each charge's wait is recorded
instead (`NamespaceQuota.would_wait_s`): the time its slowest bucket needs to repay the debt
the charge leaves, at the allocation. The debt is then forgiven (`TokenBucket.forgive`), as
that wait would have repaid it: kept, it would grow for as long as callers send above the
allocation, and each later charge would be "held" for all of it. So a flow sending ``W``
units in ``T`` seconds against an allocation ``a`` records ``max(0, W / a - T)`` seconds,
give or take one charge: the time enforcing would have added to send the same. Below its
allocation (with the burst a bucket holds) a flow records nothing; the units charged past
the allocation are recorded too (`NamespaceQuota.over_allocation`). The demand reported is
the rate the callers send at, which is what they want: nothing held them back.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from typing import Callable, Optional

from ._bucket import TokenBucket
from ._demand import DemandEstimator
from ._exceptions import ConfigurationError
from ._limiter import Limiter, Reservation
from .wire import (
    BURST_S,
    DEMAND_CHANGE,
    DIMENSIONS,
    KINDS,
    UNKNOWN_DEMAND,
    UNLIMITED_ALLOCATION,
    demand_range,
    fell,
    held_range,
)

__all__ = ["CLAIM", "DEFAULT_INTERVAL_S", "Fallbacks", "NamespaceQuota"]

_CLEAR = Reservation([])  # what an observed caller waits for: nothing

MAX_SLEEP_S = 0.1
# Of the report interval: how long a kind announced but not charged claims an unknown demand.
# Long enough for a starting task's first charges (the estimator then measures it), short
# enough that a worker which announces and idles holds a share it does not use only briefly.
CLAIM = 0.25
DEFAULT_INTERVAL_S = 1.0  # the server's default report interval, until an answer says
_NS_PER_SECOND = 1_000_000_000


Fallbacks = Optional[Mapping[str, float]]
"""An answer's fair shares per dimension (``fallbackAllocations``; -1 unlimited)."""


class NamespaceQuota:
    """The limits one process enforces for one namespace.

    `clock` returns monotonic nanoseconds (`time.monotonic_ns` by default) for the buckets
    and demand estimators; `sleep` is what `acquire` waits with. Tests and the quota
    simulator inject both to run on fake time.
    """

    __slots__ = (
        "_buckets",
        "_clock",
        "_demand_bounds",
        "_estimators",
        "_kinds",
        "_limiter",
        "_observe_lock",
        "_observing",
        "_over",
        "_reported",
        "_sleep",
        "_starting",
        "_would_wait",
        "namespace",
        "on_start",
        "tenant",
    )

    def __init__(
        self,
        tenant: str,
        namespace: str,
        *,
        initial_rate: float | None = None,
        limiter: Limiter | None = None,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self._limiter = limiter or Limiter()
        self._sleep = sleep
        self._clock = clock
        self._estimators = {dim: DemandEstimator(clock=clock) for dim in DIMENSIONS}
        # Kinds of traffic this process carries, and when those announced but not charged
        # since were first announced.
        self._kinds: set[str] = set()
        self._starting: dict[str, int] = {}
        self._reported: dict[str, float] = {}  # the demand each dimension last reported
        self._demand_bounds: dict[str, Callable[[float], float | None]] = {}
        #: Called when a kind is announced: the reporter then reports without waiting.
        self.on_start: Callable[[], object] | None = None
        self._buckets: dict[str, TokenBucket | None] = {
            dim: None if initial_rate is None else self._bucket(initial_rate) for dim in DIMENSIONS
        }
        self._observing = False
        # An observed charge and the forgiving of its debt are one step: another charge
        # between them would have its wait counted with the debt of this one.
        self._observe_lock = threading.Lock()
        self._would_wait = dict.fromkeys(KINDS, 0.0)
        self._over = dict.fromkeys(DIMENSIONS, 0.0)

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def use(self, kind: str) -> None:
        """Announce traffic about to flow (a task starting), so that the next report, sent
        soon, claims a share of it instead of the trickle an idle process gets.

        The claim lasts until the kind is charged or a report interval has passed since
        the first announcement not charged since, whichever comes first: announcing again
        meanwhile does not prolong it, so a worker that announces and then does nothing
        is known to be idle after an interval.

        A kind whose last report said it was busy (or claimed it) has its share already:
        a task starting then changes nothing the server should hear of at once, and the
        next report measures what it charges. Spark starts a task per partition and each
        announces its kind, so a worker running short tasks would otherwise report at
        every task rather than when its lease ends (see `demand_moved`).
        """
        _check_kind(kind)
        self._kinds.add(kind)
        if self._busy(kind):
            return
        self._starting.setdefault(kind, self._now())
        if self.on_start is not None:
            self.on_start()

    def _busy(self, kind: str) -> bool:
        """Whether the last report said the kind was busy: some demand, known or not."""
        reported = self._reported
        return reported.get(f"{kind}Msgs", 0.0) > 0 or reported.get(f"{kind}Bytes", 0.0) > 0

    def acquire(self, kind: str, msgs: float, nbytes: float) -> float:
        """Charge `msgs` and `nbytes`, then wait until allowed on; returns seconds waited."""
        return self.hold(kind, self.reserve(kind, msgs, nbytes), self._sleep)

    def reserve(self, kind: str, msgs: float, nbytes: float) -> Reservation:
        """Charge `msgs` and `nbytes` without waiting: the reservation says how long the
        caller must still wait, at the rates in force when it asks (`hold`); nothing in
        observe mode, which records the wait instead."""
        charges = self._charges(kind, msgs, nbytes)
        if self._observing:
            self._observed(kind, msgs, nbytes, charges)
            return _CLEAR
        reservation = self._limiter.reserve(charges)
        # Recorded before the wait, so that a report sent while this caller waits already
        # counts it as held back: its demand shows while it is throttled, not after.
        self._record(kind, msgs, nbytes, reservation.expected)
        return reservation

    def hold(self, kind: str, reservation: Reservation, sleep: Callable[[float], object]) -> float:
        """Sleep until `reservation` is clear; returns the seconds slept. Woken at least every
        `MAX_SLEEP_S`, so that a raised allocation (a worker's share arriving after it was
        charged at a trickle) releases it at once."""
        expected = reservation.expected
        waited = 0.0
        while True:
            seconds = min(reservation.remaining(), MAX_SLEEP_S)
            if seconds <= 0:
                break
            sleep(seconds)
            waited += seconds
        if waited > expected:  # the allocation fell meanwhile: held longer than foreseen
            self._record(kind, 0, 0, 0.0, held_before_s=waited - expected)
        elif waited < expected:  # it rose: held no longer than it was
            for dim in _dimensions(kind):
                self._estimators[dim].released(until_s=expected - waited)
        return waited

    def held_for(self, kind: str, seconds: float, sleep: Callable[[float], object]) -> float:
        """Wait `seconds` held back with nothing charged (a destination's retry delay: rows
        the caller wants to send now), counted as held from now, as a wait for the buckets
        is; returns the seconds slept."""
        self._record(kind, 0, 0, seconds)
        sleep(seconds)
        return seconds

    def charge(self, kind: str, msgs: float, nbytes: float) -> float:
        """Charge without waiting; returns the seconds the caller should wait (0.0 in
        observe mode, which records them instead)."""
        charges = self._charges(kind, msgs, nbytes)
        if self._observing:
            self._observed(kind, msgs, nbytes, charges)
            return 0.0
        wait = self._limiter.charge(charges)
        self._record(kind, msgs, nbytes, wait)
        return wait

    def _observed(
        self, kind: str, msgs: float, nbytes: float, charges: list[tuple[TokenBucket, float]]
    ) -> None:
        """Charge as when enforcing, record the wait instead of waiting, and forgive the
        debt that wait would have repaid (the module's docstring says why)."""
        with self._observe_lock:
            wait = self._limiter.reserve(charges).expected
            forgiven = [(dim, bucket.forgive()) for dim, bucket in self._kind_buckets(kind)]
            self._would_wait[kind] += wait
            for dim, tokens in forgiven:
                self._over[dim] += tokens
        # Nothing held the caller back: what it sends is what it wants.
        self._record(kind, msgs, nbytes, 0.0)

    def _kind_buckets(self, kind: str) -> list[tuple[str, TokenBucket]]:
        pairs = ((dim, self._buckets[dim]) for dim in _dimensions(kind))
        return [(dim, bucket) for dim, bucket in pairs if bucket is not None]

    @property
    def observing(self) -> bool:
        """Whether the group is in observe mode (the last answer's ``mode``): callers are
        charged and measured as when enforcing, and wait for nothing."""
        return self._observing

    def observe(self, observing: bool) -> None:
        """Switch observe mode on (the answer says ``"mode": "observe"``) or off. Switched on,
        the debt is forgiven: callers waiting now go on within `MAX_SLEEP_S`, and what they
        were still to wait is not counted (enforcing was in force when they charged)."""
        with self._observe_lock:
            if observing and not self._observing:
                for bucket in self._buckets.values():
                    if bucket is not None:
                        bucket.forgive()
            self._observing = observing

    def would_wait_s(self, kind: str) -> float:
        """Seconds callers of `kind` would have waited, had the group enforced, over every
        charge made in observe mode (since the process started): the time enforcing would
        have added to what they sent (the module's docstring defines it)."""
        _check_kind(kind)
        return self._would_wait[kind]

    def over_allocation(self, dimension: str) -> float:
        """Units charged in observe mode beyond what the dimension's allocation let through
        (the debts forgiven, summed): what enforcing would have held back, to send later."""
        if dimension not in self._over:
            raise ConfigurationError(
                f"dimension must be one of {', '.join(DIMENSIONS)}, not {dimension!r}"
            )
        return self._over[dimension]

    def _record(
        self, kind: str, msgs: float, nbytes: float, wait_s: float, held_before_s: float = 0.0
    ) -> None:
        for dim, units in zip(_dimensions(kind), (msgs, nbytes)):
            estimator = self._estimators[dim]
            if held_before_s:
                estimator.record_acquired(units, held_before_s)
            else:
                estimator.record_charged(units, wait_s)

    def rate(self, dimension: str) -> float | None:
        """The rate in force for a dimension; None when it is unlimited, or observed: then
        nothing is held back, so the Spark helpers send batches whole, as they do unlimited,
        rather than in slices of 100 ms of an allocation nobody waits for."""
        bucket = self._buckets[dimension]
        return None if bucket is None or self._observing else bucket.rate

    def usage(
        self, interval_s: float = DEFAULT_INTERVAL_S, *, enforced: bool = False
    ) -> dict[str, dict[str, float]]:
        """This report's figures for the dimensions in use (and the start of the next's);
        with `enforced`, each with the rate in force (-1 unlimited): a server that asks for
        it counts an allocation that fell in force at its old rate until a report says the
        new one is applied.

        A kind announced less than `CLAIM` of `interval_s` (the report interval) ago and not
        charged since has an unknown demand: a task is about to start, and what it will
        want is not measured yet. After that without a charge it is measured like any
        other: 0, idle.
        """
        now = self._now()
        figures = {}
        for kind in sorted(self._kinds):
            unknown = self._unknown(kind, now, interval_s)
            if not unknown:
                self._starting.pop(kind, None)
            samples = {dim: self._estimators[dim].report() for dim in _dimensions(kind)}
            demands = {dim: math.inf if unknown else got.demand for dim, got in samples.items()}
            for dim, demand in self._bounded(kind, demands, interval_s).items():
                self._reported[dim] = demand
                used = samples[dim].used
                figures[dim] = {"used": round(used), "demand": min(demand, UNKNOWN_DEMAND)}
                if enforced:
                    bucket = self._buckets[dim]
                    figures[dim]["allocation"] = (
                        UNLIMITED_ALLOCATION if bucket is None else bucket.rate
                    )
        return figures

    def demand_moved(
        self,
        threshold: float = DEMAND_CHANGE,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        fair: Fallbacks = None,
    ) -> bool:
        """Whether some dimension's demand moved by more than `threshold` since the last
        report (PIP-82's "significant change"), or an announced kind's claim ran out
        uncharged (`use`): worth reporting before the interval is up.

        ``fair`` is the last answer's fair share per dimension (its ``fallbackAllocations``):
        a move that changes no grant is none (`rgspark.wire.demand_range`, by which the
        server holds demands too): above the share, or in a dimension the group does not
        limit. Counted whole, a throttled worker's noisy demand moved by 10% at nearly every
        look; with that and a report at each task's start, a Spark worker running tasks of
        half a second reported 36 times per 8 s lease, against once now
        (`benchmarks.spark_throttle`, ``reporting``)."""
        now = self._now()
        for kind in self._starting:
            if not self._unknown(kind, now, interval_s) and math.isinf(
                self._reported.get(f"{kind}Msgs", 0.0)
            ):
                return True  # reported unknown, and known to be idle now
        for kind in self._kinds:
            demands = {dim: self._estimators[dim].demand() for dim in _dimensions(kind)}
            for dim, after in self._bounded(kind, demands, interval_s).items():
                before = self._reported.get(dim, math.inf)
                if math.isinf(before) or math.isinf(after):
                    continue  # unknown until measured; the next regular report settles it
                share = None if fair is None else fair.get(dim)
                if share is None:  # not known: every move counts
                    low, high = held_range(before, threshold)
                else:
                    low, high = demand_range(before, share, threshold)
                if not low <= after <= high:
                    return True
        return False

    def bound_demand(self, kind: str, bound: Callable[[float], float | None]) -> None:
        """Report no more demand for `kind` than `bound(interval_s)` msgs/s when it gives one:
        the rate a destination that pushes back lets through by the next report
        (`rgspark._pushback.AimdRate.usable`). Its bytes are scaled down alike."""
        _check_kind(kind)
        self._demand_bounds[kind] = bound

    def _bounded(self, kind: str, demands: dict[str, float], interval_s: float) -> dict[str, float]:
        bound = self._demand_bounds.get(kind)
        limit = None if bound is None else bound(interval_s)
        msgs = demands[f"{kind}Msgs"]
        if limit is None or math.isinf(msgs) or msgs <= limit:
            return demands
        return {dim: demand * limit / msgs for dim, demand in demands.items()}

    def apply(self, allocations: Mapping[str, float]) -> bool:
        """Hold each dimension to its allocation (-1: unlimited), keeping any debt; returns
        whether some rate fell."""
        lowered = False
        for dim in DIMENSIONS:
            rate = allocations.get(dim, UNLIMITED_ALLOCATION)
            bucket = self._buckets[dim]
            if rate < 0 or rate == 0:
                self._buckets[dim] = None
            elif bucket is None:
                self._buckets[dim] = self._bucket(rate)
            elif rate != bucket.rate:
                lowered = lowered or fell(bucket.rate, rate)
                bucket.set_rate(rate, rate * BURST_S)
        return lowered

    def _unknown(self, kind: str, now: int, interval_s: float) -> bool:
        announced = self._starting.get(kind)
        return announced is not None and now - announced < CLAIM * interval_s * _NS_PER_SECOND

    def _charges(self, kind: str, msgs: float, nbytes: float) -> list[tuple[TokenBucket, float]]:
        _check_kind(kind)
        self._kinds.add(kind)
        self._starting.pop(kind, None)
        pairs = ((self._buckets[f"{kind}Msgs"], msgs), (self._buckets[f"{kind}Bytes"], nbytes))
        return [(bucket, amount) for bucket, amount in pairs if bucket is not None and amount]

    def _now(self) -> int:
        return time.monotonic_ns() if self._clock is None else self._clock()

    def _bucket(self, rate: float) -> TokenBucket:
        return _bucket(rate) if self._clock is None else _bucket(rate, self._clock)


def _dimensions(kind: str) -> tuple[str, str]:
    return f"{kind}Msgs", f"{kind}Bytes"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be 'publish' or 'dispatch', not {kind!r}")


def _bucket(rate: float, clock: Callable[[], int] | None = None) -> TokenBucket:
    # Empty at first: processes that start together must not all burst at once.
    return TokenBucket(rate, rate * BURST_S, initial_tokens=0, clock=clock)
