"""Taking part in a group's quota: measure, report, apply the allocation, release at exit.

One `Reporter` per process and server: it owns, per namespace, a bucket for each of the four
dimensions (publish/dispatch x msgs/bytes) and a demand estimator beside each. Callers charge
what they did through `NamespaceQuota.acquire` (or `charge`, to wait themselves); a daemon
thread reports every interval the server asks for and sets each bucket to its allocation.

Idle is known: a kind of traffic announced (`NamespaceQuota.use`, a task starting) has an
unknown demand, which the server reads as "owed a fair share", only until it is charged or a
quarter of the report interval (`CLAIM`) has passed; then it reports what the estimator
measured, 0 when nothing was charged, and holds only the floor. It reports again as soon as
its demand moves (`Reporter.due_in`), so a worker that wakes has a share within an interval.

Leases. Each answer says how long it holds (``leaseMs``): a report interval while the
worker settles, longer (8 s by default) once it is steady, and the worker reports again
when its lease ends, or at once when its demand moves enough to change a grant
(`NamespaceQuota.demand_moved`) or a task of a kind it last reported idle starts
(`NamespaceQuota.use`).

Fail-static, with a bound. When the server cannot be reached, the reporter retries with
exponential backoff (capped at `MAX_BACKOFF_S`), and:

- while the last answer's lease, plus `GRACE_INTERVALS` (2) report intervals, has not run
  out, the buckets keep the last allocation: the server still counts this worker alive
  and holding it, so the allocations in force stay within the server's bound;
- from then on (the server counts the worker gone, and so, if it is down for everyone,
  is every worker), the buckets hold the last answer's ``fallbackAllocations``: the
  worker's max-min fair share of the group (namespaces first) given every reporter's demand
  as last reported. Those of all workers add up to at most the group's quota as of their
  last answers, so a fleet that lost the server together stays within the quota; a busy
  worker keeps about what it had, an idle one its floor, and a newcomer, whose demand was
  not known yet, about an equal share, never the trickle it probed with (an older server
  that sends no fallback: the last allocation stays);
- the next successful answer puts the allocation back in force.

So a worker runs above its last allocation only once the server counts it gone. When the
server goes down for everyone, the workers switch within a lease of each other (the spread
of their last answers): meanwhile the sum in force is at
most ``Σ max(last_i, fallback_i)`` (the quota in a steady state, where no allocation is
above its fair share but for growth room out of spare quota; more only while allocations
are still moving); from then on it is at most the quota. A worker cut off from a server
that others still reach adds its fallback to what the server hands out, until it reaches
the server again.

Changes pushed. Beside the reporting thread, a second one holds the server's long poll on
changes (``GET /quota/v1/changes``) to the admin state and to its groups' shares: when a
group, an attachment or the default group changes, the server answers it at once and the
reporter reports then, not at its next turn, so a quota cut is in force within a fraction
of a second whatever the report interval or lease. When others join, leave or change
their demand enough to move this worker's share, the group's wake moves and the worker
reports as soon as `MIN_SPACING` of an interval has passed since its last report. A server
without that endpoint is simply not watched.

The report interval (how long a claim to unknown demand lasts, and what the grace counts
in) is the server's, which every answer carries (``reportPeriodMs``), 1 s before any
answer; not the wait an answer asks for, which is shorter while a reporter settles. Before
any allocation arrived, a
dimension the group limits is held to `initial_rate` (None: unlimited until the first
answer); `ResourceGroupClient`'s ``on_no_policy`` chooses that.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional

from ._admin import AdminClient
from ._bucket import TokenBucket
from ._demand import DemandEstimator
from ._exceptions import AdminServerError, ConfigurationError, NamespaceNotFoundError
from ._limiter import Limiter
from .wire import (
    BURST_S,
    DEMAND_CHANGE,
    DIMENSIONS,
    GRACE_INTERVALS,
    KINDS,
    UNKNOWN_DEMAND,
    UNLIMITED_ALLOCATION,
    demand_range,
    fell,
    held_range,
)

__all__ = ["NamespaceQuota", "Reporter"]

logger = logging.getLogger("rgspark")

MAX_BACKOFF_S = 30.0
MAX_SLEEP_S = 0.1
MIN_SPACING = 0.125  # of the report interval: the least time between two reports
# Of the report interval: how long a kind announced but not charged claims an unknown demand.
# Long enough for a starting task's first charges (the estimator then measures it), short
# enough that a worker which announces and idles holds a share it does not use only briefly.
CLAIM = 0.25
DEFAULT_INTERVAL_S = 1.0  # the server's default report interval, until an answer says
WATCH_S = 30.0  # how long one long poll on changes waits for one
MAX_WATCHED_GROUPS = 100  # the most groups one long poll watches (the server's limit)
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
        "_estimators",
        "_kinds",
        "_limiter",
        "_reported",
        "_sleep",
        "_starting",
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
        #: Called when a kind is announced: the reporter then reports without waiting.
        self.on_start: Callable[[], object] | None = None
        self._buckets: dict[str, TokenBucket | None] = {
            dim: None if initial_rate is None else self._bucket(initial_rate) for dim in DIMENSIONS
        }

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
        reservation = self._limiter.reserve(self._charges(kind, msgs, nbytes))
        expected = reservation.remaining()
        # Recorded before the wait, so that a report sent while this caller waits already
        # counts it as held back: its demand shows while it is throttled, not after.
        self._record(kind, msgs, nbytes, expected)
        waited = 0.0
        while True:
            # Woken at least every MAX_SLEEP_S: a raised allocation releases it at once.
            seconds = min(reservation.remaining(), MAX_SLEEP_S)
            if seconds <= 0:
                break
            self._sleep(seconds)
            waited += seconds
        if waited > expected:  # the allocation fell meanwhile: held longer than foreseen
            self._record(kind, 0, 0, 0.0, held_before_s=waited - expected)
        return waited

    def charge(self, kind: str, msgs: float, nbytes: float) -> float:
        """Charge without waiting; returns the seconds the caller should wait."""
        wait = self._limiter.charge(self._charges(kind, msgs, nbytes))
        self._record(kind, msgs, nbytes, wait)
        return wait

    def _record(
        self, kind: str, msgs: float, nbytes: float, wait_s: float, held_before_s: float = 0.0
    ) -> None:
        for dim, units in ((f"{kind}Msgs", msgs), (f"{kind}Bytes", nbytes)):
            estimator = self._estimators[dim]
            if held_before_s:
                estimator.record_acquired(units, held_before_s)
            else:
                estimator.record_charged(units, wait_s)

    def rate(self, dimension: str) -> float | None:
        """The rate in force for a dimension; None when it is unlimited."""
        bucket = self._buckets[dimension]
        return None if bucket is None else bucket.rate

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
            for dim in (f"{kind}Msgs", f"{kind}Bytes"):
                sample = self._estimators[dim].report()
                demand = math.inf if unknown else sample.demand
                self._reported[dim] = demand
                figures[dim] = {"used": round(sample.used), "demand": min(demand, UNKNOWN_DEMAND)}
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
        for dim, before in self._reported.items():
            after = self._estimators[dim].demand()
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


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be 'publish' or 'dispatch', not {kind!r}")


def _bucket(rate: float, clock: Callable[[], int] | None = None) -> TokenBucket:
    # Empty at first: processes that start together must not all burst at once.
    return TokenBucket(rate, rate * BURST_S, initial_tokens=0, clock=clock)


class Reporter:
    """Reports a process's usage for its namespaces and applies the allocations it gets back.

    `run_once` does one round trip and raises when it fails; `report` does one with the
    failure handling of the module's fail-static rule; `due_in` says when the next is due.
    `start` runs them on a daemon thread at the server's cadence; `close` stops the thread
    and releases the shares at once. `wall_clock` (seconds since the epoch) and `sleep`
    (None: a wait that a task start cuts short) let tests and the quota simulator drive it
    on fake time.
    """

    def __init__(
        self,
        admin: AdminClient,
        namespaces: Iterable[NamespaceQuota],
        *,
        reporter_id: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self.admin = admin
        self.namespaces = {quota.key: quota for quota in namespaces}
        self.reporter_id = reporter_id or uuid.uuid4().hex
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._last_report = self._due = wall_clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False  # a task started since the last report
        self._pushed = False  # the server told of an admin change since the last report
        self._woken = False  # the server told of a move in a group's shares since then
        self._answered = threading.Event()  # the groups to watch are those answered last
        self._groups: frozenset[str] = frozenset()
        self._watch_admin: AdminClient | None = None
        for quota in self.namespaces.values():
            quota.on_start = self._on_start
        #: Seconds until the next report, as the last answer asked (less when it asks early).
        self.interval_s = DEFAULT_INTERVAL_S
        #: The server's report interval (its answers say it).
        self.period_s = DEFAULT_INTERVAL_S
        #: How long the last answer holds (its lease; the report interval before any).
        self.lease_s = DEFAULT_INTERVAL_S
        self.failures = 0
        #: When the server last answered (the report's sending time); None before it has.
        self.reached_at: float | None = None
        #: Whether the buckets hold the fallback allocations (fail-static, past the bound).
        self.on_fallback = False
        self._fallbacks: dict[str, Fallbacks] = {}
        #: Seconds the server's request quota asked this reporter to hold back, in all.
        self.throttled_s = 0.0
        self._not_before = 0.0
        # Whether the server asks each report to say what the buckets enforce (an older
        # one refuses a report that does): known from its answers.
        self._confirms = False
        self._at_once = False  # whether this report was sent at once, to say a fall applied

    def run_once(self) -> float:
        """Report and apply the answer; returns the seconds until the next report."""
        now = self._wall_clock()
        return self.take_answer(self.admin.report(self.reporter_id, self.request(now)), now)

    def request(self, now: float) -> dict[str, Any]:
        """The body of a report sent at ``now`` (it ends the interval it reports on).

        `run_once` is `request`, the round trip and `take_answer`; a caller that makes the
        round trip itself (the join-storm benchmark drives thousands of reporters on one
        event loop) calls the two halves, and `failed` when the round trip fails."""
        confirming = self._confirms
        body: dict[str, Any] = {
            "sentAtMs": round(now * 1000),
            "intervalMs": max(1, round((now - self._last_report) * 1000)),
            "namespaces": {
                key: quota.usage(self.period_s, enforced=confirming)
                for key, quota in self.namespaces.items()
            },
        }
        self._last_report = now
        self._started = self._pushed = self._woken = False
        return body

    def take_answer(self, answer: Mapping[str, Any], now: float) -> float:
        """Apply the answer to the report sent at ``now``; returns the seconds until the
        next report."""
        confirming = self._confirms  # whether the report said what the buckets enforce
        groups = set()
        fell = False
        for key, result in answer.get("namespaces", {}).items():
            quota = self.namespaces.get(key)
            if quota is not None:
                fell = quota.apply(result.get("allocations", {})) or fell
                self._fallbacks[key] = result.get("fallbackAllocations")
            if result.get("resourceGroup") is not None:
                groups.add(result["resourceGroup"])
        self._groups = frozenset(groups)
        self.interval_s = answer.get("reportIntervalMs", 1000) / 1000
        period_ms = answer.get("reportPeriodMs")
        if period_ms is not None:
            self.period_s = period_ms / 1000
        else:  # an older server: the longest wait its answers asked for
            first = self.reached_at is None
            self.period_s = self.interval_s if first else max(self.period_s, self.interval_s)
        lease_ms = answer.get("leaseMs")
        self.lease_s = self.period_s if lease_ms is None else lease_ms / 1000
        self._confirms = answer.get("confirmFalls", False)
        self.reached_at = now
        self._answered.set()
        self.on_fallback = False
        # The server counts a fall in force at the old rate until a report says it is
        # applied: saying so at once frees the room for the workers that wait for it (once
        # in a row: a report sent at once is never followed by another at once).
        at_once = fell and confirming and not self._at_once
        self._at_once = at_once
        delay = max(0.0 if at_once else self.interval_s, self._honour_throttle())
        self._due = now + delay
        return delay

    def report(self) -> bool:
        """One report, as the reporter thread sends it; returns whether the server answered.

        On failure, the buckets keep their allocation until the fail-static bound has
        passed, then hold the fallback (see the module's docstring), and the next report is
        due after a backoff, or at the bound if that comes first.
        """
        try:
            self.run_once()
        except AdminServerError as exc:
            self.failed(exc)
            return False
        if self.failures:
            logger.info("rgspark: admin server reachable again")
        self.failures = 0
        return True

    def fallback_at(self) -> float | None:
        """When the buckets move to the fallback if the server stays unreachable; None
        before any answer (``on_no_policy`` applies then)."""
        if self.reached_at is None:
            return None
        return self.reached_at + self.lease_s + GRACE_INTERVALS * self.period_s

    def failed(self, exc: AdminServerError) -> None:
        """The report failed with ``exc``: back off, and fall back once past the bound."""
        self.failures += 1
        now = self._wall_clock()
        deadline = self.fallback_at()
        if deadline is not None and now >= deadline and not self.on_fallback:
            self._fall_back()
        due = now + min(self.period_s * 2**self.failures, MAX_BACKOFF_S)
        if deadline is not None and not self.on_fallback:
            due = min(due, deadline)  # try once more at the bound before falling back
        self._due = due
        self._honour_throttle()
        log = logger.warning if self.failures == 1 else logger.debug
        log("rgspark: report failed (%s); retrying in %.1f s", exc, due - now)

    def _fall_back(self) -> None:
        self.on_fallback = True
        for key, quota in self.namespaces.items():
            fallbacks = self._fallbacks.get(key)
            if fallbacks is not None:
                quota.apply(fallbacks)
        logger.warning(
            "rgspark: no answer from the admin server for its lease and %d report intervals; "
            "holding the fallback allocations (its fair share of each group) until it answers",
            GRACE_INTERVALS,
        )

    def _honour_throttle(self) -> float:
        """The server's throttle time (KIP-124): no call before it has passed."""
        throttle = self.admin.throttle_s
        if throttle:
            self.throttled_s += throttle
            self._not_before = self._wall_clock() + throttle
            logger.info("rgspark: the admin server throttles this worker for %.2f s", throttle)
        return throttle

    def due_in(self, now: float) -> float:
        """Seconds from `now` until the next report should go out; 0 when it should now.

        A report is due when the last answer asked (or, after a failure, the backoff or
        the fail-static bound says); at once when the server pushed an admin change
        (`changed`); sooner, once `MIN_SPACING` of an interval has passed since the last,
        when a task of an idle kind started (`NamespaceQuota.use`), some demand moved
        (`NamespaceQuota.demand_moved`, up to the fair share) or the server said a group's
        shares moved (`changed`), but not while the server fails; never before the
        server's throttle time has passed. Otherwise, the time to look again: the reporter
        thread, and the quota simulator, call this whenever they wake.
        """
        due = max(self._due, self._not_before)
        if now >= due:
            return 0.0
        if self.failures:
            return due - now
        if self._pushed and now >= self._not_before:
            return 0.0  # the limits changed: the worker learns its new share now
        spacing = self.period_s * MIN_SPACING
        earliest = max(self._last_report + spacing, self._not_before)
        if now >= earliest and (self._started or self._woken or self._moved()):
            return 0.0
        look = earliest if now < earliest else now + spacing
        return min(due, look) - now

    def _on_start(self) -> None:
        self._started = True
        self._wake.set()

    def changed(self, *, admin: bool) -> None:
        """The server says something this process's shares come from changed: the admin
        state (``admin``: report at once) or a group's shares (report soon: `due_in`)."""
        if admin:
            self._pushed = True
            self._answered.clear()  # watch the groups that the next answer gives
        else:
            self._woken = True
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rgspark-reporter", daemon=True)
            self._thread.start()
            # Its own client: its own throttle times, and closed at `close` to end the poll.
            self._watch_admin = self.admin.watcher()
            threading.Thread(
                target=self._watch, args=(self._watch_admin,), name="rgspark-changes", daemon=True
            ).start()

    def _watch(self, admin: AdminClient) -> None:
        """Hold the long poll on changes; on one, have the reporter report (`changed`)."""
        after: int | None = None
        wakes: dict[str, int | None] = {}
        failures = 0
        try:
            while not self._stop.is_set():
                # The groups to watch are those of the last answer, once it came.
                self._answered.wait(WATCH_S)
                groups = sorted(self._groups)[:MAX_WATCHED_GROUPS]
                wakes = {group: wakes.get(group) for group in groups}
                try:
                    generation, seen = admin.changes(after, wakes, WATCH_S)
                except NamespaceNotFoundError:  # a server without the endpoint
                    logger.info("rgspark: the admin server does not push changes")
                    return
                except AdminServerError:  # the reports notice and say so
                    if self._stop.is_set():  # `close` ended the poll
                        return
                    failures += 1
                    self._stop.wait(min(self.period_s * 2**failures, MAX_BACKOFF_S))
                    continue
                failures = 0
                if after is not None and generation > after:
                    self.changed(admin=True)
                elif any(wakes.get(g) not in (None, wake) for g, wake in seen.items()):
                    self.changed(admin=False)
                after = generation
                wakes.update(seen)
                if admin.throttle_s:
                    self._stop.wait(admin.throttle_s)
        finally:
            admin.close()

    def close(self) -> None:
        """Stop reporting and release this process's shares, so others get them at once."""
        self._stop.set()
        self._wake.set()
        self._answered.set()  # a watcher waiting for its groups stops now
        if self._watch_admin is not None:
            self._watch_admin.abort()  # ends its long poll
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.admin.release(self.reporter_id)
        except AdminServerError as exc:
            logger.info("rgspark: could not release reporter %s: %s", self.reporter_id, exc)
        finally:
            self.admin.close()

    def _wait(self) -> None:
        """Wait until `due_in` says the next report is due, or the reporter is closed."""
        while not self._stop.is_set():
            seconds = self.due_in(self._wall_clock())
            if seconds <= 0:
                return
            if self._sleep is not None:
                self._sleep(seconds)
            elif self._wake.wait(seconds):  # a task started, or a change: look again at once
                self._wake.clear()

    def _moved(self) -> bool:
        return any(
            quota.demand_moved(interval_s=self.period_s, fair=self._fallbacks.get(key))
            for key, quota in self.namespaces.items()
        )

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            self._wait()
            if self._stop.is_set():
                return
            self.report()
