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


class NamespaceQuota:
    """The limits one process enforces for one namespace."""

    __slots__ = ("_buckets", "_estimators", "_limiter", "namespace", "tenant")

    def __init__(
        self,
        tenant: str,
        namespace: str,
        *,
        initial_rate: float | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self._limiter = limiter or Limiter()
        self._estimators = {dim: DemandEstimator() for dim in DIMENSIONS}
        self._buckets: dict[str, TokenBucket | None] = {
            dim: None if initial_rate is None else _bucket(initial_rate) for dim in DIMENSIONS
        }

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def acquire(self, kind: str, msgs: int, nbytes: int) -> float:
        """Charge `msgs` and `nbytes`, then wait until allowed on; returns seconds waited."""
        charges = self._charges(kind, msgs, nbytes)
        waited = self._limiter.acquire(charges) if charges else 0.0
        self._estimators[f"{kind}Msgs"].record_acquired(msgs, waited)
        self._estimators[f"{kind}Bytes"].record_acquired(nbytes, waited)
        return waited

    def charge(self, kind: str, msgs: int, nbytes: int) -> float:
        """Charge without waiting; returns the seconds the caller should wait."""
        charges = self._charges(kind, msgs, nbytes)
        wait = self._limiter.charge(charges) if charges else 0.0
        self._estimators[f"{kind}Msgs"].record_charged(msgs, wait)
        self._estimators[f"{kind}Bytes"].record_charged(nbytes, wait)
        return wait

    def rate(self, dimension: str) -> float | None:
        """The rate in force for a dimension; None when it is unlimited."""
        bucket = self._buckets[dimension]
        return None if bucket is None else bucket.rate

    def usage(self) -> dict[str, dict[str, float]]:
        """This report's figures per dimension (and the start of the next report's)."""
        figures = {}
        for dim, estimator in self._estimators.items():
            sample = estimator.report()
            demand = sample.demand if math.isfinite(sample.demand) else UNKNOWN_DEMAND
            figures[dim] = {"used": round(sample.used), "demand": min(demand, UNKNOWN_DEMAND)}
        return figures

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
        if kind not in KINDS:
            raise ConfigurationError(f"kind must be 'publish' or 'dispatch', not {kind!r}")
        pairs = ((self._buckets[f"{kind}Msgs"], msgs), (self._buckets[f"{kind}Bytes"], nbytes))
        return [(bucket, amount) for bucket, amount in pairs if bucket is not None and amount]


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
        self._thread: threading.Thread | None = None
        self.interval_s = 1.0
        self.failures = 0

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
        return self.interval_s

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rgspark-reporter", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop reporting and release this process's shares, so others get them at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.admin.release(self.reporter_id)
        except AdminServerError as exc:
            logger.info("rgspark: could not release reporter %s: %s", self.reporter_id, exc)
        finally:
            self.admin.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.run_once()
                if self.failures:
                    logger.info("rgspark: admin server reachable again")
                self.failures = 0
            except AdminServerError as exc:
                # Fail-static: the buckets keep their last allocation while we retry.
                self.failures += 1
                delay = min(self.interval_s * 2**self.failures, MAX_BACKOFF_S)
                log = logger.warning if self.failures == 1 else logger.debug
                log("rgspark: report failed (%s); retrying in %.1f s", exc, delay)
