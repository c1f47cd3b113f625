"""Prometheus metrics, on a registry of the app's own (names modelled on Pulsar's
``pulsar_resource_group_*``).

Group figures are kept up to date as reports arrive: each report already reads every fresh
report of its groups to allocate, so it sets the group's totals then, and a scrape reads
memory only. A group nobody reported for within `STALE_INTERVALS` is dropped from the output.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

STALE_INTERVALS = 3


class Metrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._group_seen: dict[str, float] = {}
        self._group_dims: dict[str, set[str]] = {}
        r = self.registry
        self.http_requests = Counter(
            "rg_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=r
        )
        self.http_latency = Histogram(
            "rg_http_request_duration_seconds",
            "Time to serve an HTTP request, throttling delay included.",
            ["method", "route"],
            registry=r,
        )
        self.database_errors = Counter(
            "rg_database_errors", "Requests that failed on the database.", ["kind"], registry=r
        )
        self.role_requests = Counter(
            "rg_role_requests", "Authenticated requests per role.", ["role"], registry=r
        )
        self.role_request_rate = Gauge(
            "rg_role_request_rate",
            "A role's request rate on this process, as its request quota measures it.",
            ["role"],
            registry=r,
        )
        self.role_throttle = Counter(
            "rg_role_throttle_seconds",
            "Seconds responses to a role were delayed by its request quota.",
            ["role"],
            registry=r,
        )
        dims = ["group", "dimension"]
        self.group_limit = Gauge(
            "rg_resource_group_limit",
            "A group's configured rate per second; -1 when unlimited.",
            dims,
            registry=r,
        )
        self.group_usage = Gauge(
            "rg_resource_group_usage",
            "Units per second used, from fresh reports.",
            dims,
            registry=r,
        )
        self.group_demand = Gauge(
            "rg_resource_group_demand",
            "Units per second wanted, from fresh reports (unknown demands left out).",
            dims,
            registry=r,
        )
        self.group_allocation = Gauge(
            "rg_resource_group_allocation",
            "Sum of the rates allocated to the group's reporters.",
            dims,
            registry=r,
        )
        self.group_reporters = Gauge(
            "rg_resource_group_reporters", "Reporters with fresh reports.", ["group"], registry=r
        )

    def record_group(
        self,
        group: str,
        limits: Mapping[str, float],
        reporters: int,
        totals: Iterable[tuple[str, float, float, float]],
    ) -> None:
        """A group's state as one report saw it: limits per dimension, reporters, and per
        dimension (usage, demand, allocation) summed over every fresh reporter."""
        with self._lock:
            self._group_seen[group] = self._clock()
            self.group_reporters.labels(group).set(reporters)
            dims = self._group_dims.setdefault(group, set())
            for dim, limit in limits.items():
                dims.add(dim)
                self.group_limit.labels(group, dim).set(limit)
            for dim, usage, demand, allocation in totals:
                dims.add(dim)
                self.group_usage.labels(group, dim).set(usage)
                self.group_demand.labels(group, dim).set(demand)
                self.group_allocation.labels(group, dim).set(allocation)

    def forget_stale_groups(self, interval_s: float) -> None:
        horizon = self._clock() - STALE_INTERVALS * interval_s
        with self._lock:
            for group in [g for g, seen in self._group_seen.items() if seen < horizon]:
                del self._group_seen[group]
                for dim in self._group_dims.pop(group, set()):
                    for gauge in self._group_gauges():
                        with contextlib.suppress(KeyError):
                            gauge.remove(group, dim)
                self.group_reporters.remove(group)

    def _group_gauges(self) -> tuple[Gauge, ...]:
        return (self.group_limit, self.group_usage, self.group_demand, self.group_allocation)
