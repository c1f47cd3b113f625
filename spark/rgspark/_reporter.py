"""Taking part in a group's quota: measure, report, apply the allocation, release at exit.

One `Reporter` per process and server: it owns, per namespace, a bucket for each of the four
dimensions (publish/dispatch x msgs/bytes) and a demand estimator beside each. Callers charge
what they did through `NamespaceQuota.acquire` (or `charge`, to wait themselves); a daemon
thread reports every interval the server asks for and sets each bucket to its allocation.

Fail-static: when the server cannot be reached, the buckets keep their last allocation and the
reporter retries with exponential backoff. Before any allocation arrived, a dimension the
group limits is held to `initial_rate` (None: unlimited until the first answer).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any, Callable

from ._admin import AdminClient
from ._bucket import TokenBucket
from ._demand import DemandEstimator
from ._exceptions import AdminServerError, ConfigurationError
from ._limiter import Limiter

__all__ = ["DIMENSIONS", "KINDS", "NamespaceQuota", "Reporter"]

logger = logging.getLogger("rgspark")

KINDS = ("publish", "dispatch")
DIMENSIONS = ("publishMsgs", "publishBytes", "dispatchMsgs", "dispatchBytes")
# A bucket holds a tenth of a second of its rate: enough for the slices the Spark helpers
# charge, small enough that reporters waking together cannot burst far past the group's rate.
BURST_S = 0.1
# The most a report may claim: what the server reads as "demand not known yet".
UNKNOWN_DEMAND = 1e18
MAX_BACKOFF_S = 30.0
MAX_SLEEP_S = 0.1
MIN_SPACING = 0.125  # of the report interval: the least time between two reports
DEMAND_CHANGE = 0.10  # a demand moving more than this is reported before the interval is up


class NamespaceQuota:
    """The limits one process enforces for one namespace."""

    __slots__ = (
        "_buckets",
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
    ) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self._limiter = limiter or Limiter()
        self._sleep = sleep
        self._estimators = {dim: DemandEstimator() for dim in DIMENSIONS}
        # Kinds of traffic this process carries, and those announced but not charged since.
        self._kinds: set[str] = set()
        self._starting: set[str] = set()
        self._reported: dict[str, float] = {}  # the demand each dimension last reported
        #: Called when a kind is announced: the reporter then reports without waiting.
        self.on_start: Callable[[], object] | None = None
        self._buckets: dict[str, TokenBucket | None] = {
            dim: None if initial_rate is None else _bucket(initial_rate) for dim in DIMENSIONS
        }

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def use(self, kind: str) -> None:
        """Announce traffic about to flow (a task starting), so that the next report, sent at
        once, claims a share of it instead of the trickle an idle process gets."""
        _check_kind(kind)
        self._kinds.add(kind)
        self._starting.add(kind)
        if self.on_start is not None:
            self.on_start()

    def acquire(self, kind: str, msgs: int, nbytes: int) -> float:
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

    def charge(self, kind: str, msgs: int, nbytes: int) -> float:
        """Charge without waiting; returns the seconds the caller should wait."""
        wait = self._limiter.charge(self._charges(kind, msgs, nbytes))
        self._record(kind, msgs, nbytes, wait)
        return wait

    def _record(
        self, kind: str, msgs: int, nbytes: int, wait_s: float, held_before_s: float = 0.0
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

    def usage(self) -> dict[str, dict[str, float]]:
        """This report's figures for the dimensions in use (and the start of the next's).

        A kind announced but not charged since has an unknown demand: a task is about to
        start, and what it will want is not measured yet.
        """
        figures = {}
        for kind in sorted(self._kinds):
            for dim in (f"{kind}Msgs", f"{kind}Bytes"):
                sample = self._estimators[dim].report()
                demand = sample.demand if kind not in self._starting else math.inf
                self._reported[dim] = demand
                figures[dim] = {
                    "used": round(sample.used),
                    "demand": min(demand, UNKNOWN_DEMAND),
                }
        return figures

    def demand_moved(self, threshold: float = DEMAND_CHANGE) -> bool:
        """Whether some dimension's demand moved by more than `threshold` since the last
        report (PIP-82's "significant change"): worth reporting before the interval is up."""
        for dim, before in self._reported.items():
            now = self._estimators[dim].demand()
            if math.isinf(before) or math.isinf(now):
                continue  # unknown until measured; the next regular report settles it
            if abs(now - before) > threshold * max(before, now, 1.0):
                return True
        return False

    def apply(self, allocations: dict[str, float]) -> None:
        """Hold each dimension to its allocation (-1: unlimited), keeping any debt."""
        for dim in DIMENSIONS:
            rate = allocations.get(dim, -1.0)
            bucket = self._buckets[dim]
            if rate < 0 or rate == 0:
                self._buckets[dim] = None
            elif bucket is None:
                self._buckets[dim] = _bucket(rate)
            elif rate != bucket.rate:
                bucket.set_rate(rate, rate * BURST_S)

    def _charges(self, kind: str, msgs: int, nbytes: int) -> list[tuple[TokenBucket, int]]:
        _check_kind(kind)
        self._kinds.add(kind)
        self._starting.discard(kind)
        pairs = ((self._buckets[f"{kind}Msgs"], msgs), (self._buckets[f"{kind}Bytes"], nbytes))
        return [(bucket, amount) for bucket, amount in pairs if bucket is not None and amount]


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be 'publish' or 'dispatch', not {kind!r}")


def _bucket(rate: float) -> TokenBucket:
    # Empty at first: processes that start together must not all burst at once.
    return TokenBucket(rate, rate * BURST_S, initial_tokens=0)


class Reporter:
    """Reports a process's usage for its namespaces and applies the allocations it gets back.

    `run_once` does one round trip and is all tests need; `start` runs it on a daemon thread
    at the server's cadence; `close` stops the thread and releases the shares at once.
    """

    def __init__(
        self,
        admin: AdminClient,
        namespaces: Iterable[NamespaceQuota],
        *,
        reporter_id: str | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.admin = admin
        self.namespaces = {quota.key: quota for quota in namespaces}
        self.reporter_id = reporter_id or uuid.uuid4().hex
        self._wall_clock = wall_clock
        self._last_report = wall_clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        for quota in self.namespaces.values():
            quota.on_start = self._wake.set
        self.interval_s = 1.0
        self.failures = 0
        #: Seconds the server's request quota asked this reporter to hold back, in all.
        self.throttled_s = 0.0
        self._not_before = 0.0

    def run_once(self) -> float:
        """Report and apply the answer; returns the seconds until the next report."""
        now = self._wall_clock()
        body: dict[str, Any] = {
            "sentAtMs": round(now * 1000),
            "intervalMs": max(1, round((now - self._last_report) * 1000)),
            "namespaces": {key: quota.usage() for key, quota in self.namespaces.items()},
        }
        self._last_report = now
        answer = self.admin.report(self.reporter_id, body)
        for key, result in answer.get("namespaces", {}).items():
            if key in self.namespaces:
                self.namespaces[key].apply(result.get("allocations", {}))
        self.interval_s = answer.get("reportIntervalMs", 1000) / 1000
        return max(self.interval_s, self._honour_throttle())

    def _honour_throttle(self) -> float:
        """The server's throttle time (KIP-124): no call before it has passed."""
        throttle = self.admin.throttle_s
        if throttle:
            self.throttled_s += throttle
            self._not_before = self._wall_clock() + throttle
            logger.info("rgspark: the admin server throttles this worker for %.2f s", throttle)
        return throttle

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rgspark-reporter", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop reporting and release this process's shares, so others get them at once."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.admin.release(self.reporter_id)
        except AdminServerError as exc:
            logger.info("rgspark: could not release reporter %s: %s", self.reporter_id, exc)
        finally:
            self.admin.close()

    def _wait(self, delay: float) -> None:
        """Sleep until the next report is due, or earlier when a task starts or demand moves
        by more than DEMAND_CHANGE; never report more often than MIN_SPACING allows."""
        spacing = self.interval_s * MIN_SPACING
        due = self._last_report + delay
        due = max(due, self._not_before)
        while not self._stop.is_set():
            now = self._wall_clock()
            early_ok = now - self._last_report >= spacing and now >= self._not_before
            if now >= due or (early_ok and self._moved()):
                return
            woken = self._wake.wait(min(due - now, spacing))
            if woken:
                self._wake.clear()
                now = self._wall_clock()
                hold = max(self._last_report + spacing, self._not_before) - now
                if hold > 0:
                    time.sleep(hold)
                return

    def _moved(self) -> bool:
        return any(quota.demand_moved() for quota in self.namespaces.values())

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        delay = 0.0
        while True:
            self._wait(delay)
            if self._stop.is_set():
                return
            try:
                delay = self.run_once()
                if self.failures:
                    logger.info("rgspark: admin server reachable again")
                self.failures = 0
            except AdminServerError as exc:
                # Fail-static: the buckets keep their last allocation while we retry.
                self.failures += 1
                delay = max(
                    min(self.interval_s * 2**self.failures, MAX_BACKOFF_S),
                    self._honour_throttle(),
                )
                log = logger.warning if self.failures == 1 else logger.debug
                log("rgspark: report failed (%s); retrying in %.1f s", exc, delay)
