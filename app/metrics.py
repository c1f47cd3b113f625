"""Prometheus metrics, on a registry of the app's own (names modelled on Pulsar's
``pulsar_resource_group_*``).

Group figures are kept up to date as reports arrive: each report that plans a group reads
its totals (limits, demands, allocations in force) to allocate, so it records them then,
and a scrape reads memory only. A group nobody reported for to this process within the
time a reporter stays alive between reports is dropped: its reporters are gone, or report
elsewhere. Each server process shows the groups its own reports touched, with the totals
over every reporter of the group (from the shared store), as of the last such report.

What groups used is counted, not sampled: ``rg_resource_group_used_total`` is every unit
this process's reports said they used (`app.quota.counts`), a counter to read with
``rate()`` and sum over the server processes, as Prometheus and Pulsar do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.quota.counts import UsageCounter
from rgspark.wire import DIMENSIONS


@dataclass(frozen=True, slots=True)
class RoleMetrics:
    requests: Counter
    throttle: Counter


class Metrics:
    def __init__(
        self,
        stale_after_s: float,
        counter: UsageCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock = clock
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
        self.role_throttle = Counter(
            "rg_role_throttle_seconds",
            "Seconds responses to a role were delayed by its request quota.",
            ["role"],
            registry=r,
        )
        self.history_samples = Histogram(
            "rg_usage_history_sample_seconds",
            "Time to take a usage-history sample; only the process that takes one observes it.",
            registry=r,
        )
        # Labelled children, kept: looking one up costs more than updating it, on every request.
        self._roles: dict[str, RoleMetrics] = {}
        self._requests: dict[tuple[str, str, int], Counter] = {}
        self._latencies: dict[tuple[str, str], Histogram] = {}
        self.groups = GroupStats(clock, stale_after_s)
        self._counter = counter

    def exposition(self, observing: Collection[str] | None = None) -> bytes:
        """Every metric in Prometheus' text format; ``observing``, the groups in observe
        mode (None: not known, the database being away), adds the modes."""
        used = {} if self._counter is None else self._counter.totals()
        modes = b"" if observing is None else self.groups.modes_exposition(observing)
        return (
            generate_latest(self.registry)
            + self.groups.exposition()
            + modes
            + used_exposition(used)
        )

    def role(self, role: str) -> RoleMetrics:
        metrics = self._roles.get(role)
        if metrics is None:
            metrics = self._roles[role] = RoleMetrics(
                self.role_requests.labels(role), self.role_throttle.labels(role)
            )
        return metrics

    def watch_request_rates(self, rates: Callable[[], Mapping[str, float]]) -> None:
        """Show ``rates()`` (each role's request rate, as its request quota measures it) as
        ``rg_role_request_rate``: read when Prometheus scrapes, so a quiet role's decays to 0."""
        self.registry.register(RoleRequestRates(rates))

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        counter = self._requests.get((method, route, status))
        if counter is None:
            counter = self._requests[method, route, status] = self.http_requests.labels(
                method, route, str(status)
            )
        counter.inc()
        histogram = self._latencies.get((method, route))
        if histogram is None:
            histogram = self._latencies[method, route] = self.http_latency.labels(method, route)
        histogram.observe(seconds)


class RoleRequestRates(Collector):
    def __init__(self, rates: Callable[[], Mapping[str, float]]) -> None:
        self._rates = rates

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "rg_role_request_rate",
            "A role's request rate on this process, as its request quota measures it.",
            labels=["role"],
        )
        for role, rate in sorted(self._rates().items()):
            family.add_metric([role], rate)
        yield family


GroupTotals = tuple[str, float, float, float]
"""(dimension, limit, demand, allocation) of one group."""


_GROUP_FAMILIES = (
    ("limit", "A group's configured rate per second; -1 when unlimited."),
    ("demand", "Units per second wanted, summed over live reporters that know it."),
    ("allocation", "Sum of the rates allocated to the group's live reporters, in force."),
)
_REPORTERS_HELP = "Live reporters (worker processes)."
_USED_HELP = "Units a group's reporters reported using, counted by this server process."
_OBSERVE_HELP = (
    "1 while the group is in observe mode (its workers are planned as usual but hold nothing "
    "back), 0 while it enforces."
)
_HOLD_BACK_HELP = (
    "In observe mode, the share of what the group's workers send that enforcing would hold "
    "back: max(0, demand - allocation) / demand, the demand of workers held to nothing being "
    "what they use."
)


def _label(value: str) -> str:
    """A label's value as the text format quotes it (prometheus_client's escaping)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _value(value: float) -> str:
    """A sample's value: Python's shortest repr, which Prometheus reads as it is (Go's
    ParseFloat), at a third of the cost of prometheus_client's Go-styled one."""
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


def _family(name: str, text: str, samples: list[str], kind: str = "gauge") -> str:
    return f"# HELP {name} {text}\n# TYPE {name} {kind}\n" + "".join(samples)


def used_exposition(totals: Mapping[str, Sequence[float]]) -> bytes:
    """``rg_resource_group_used_total`` by group and dimension, in Prometheus' text format."""
    samples = []
    for group, units in totals.items():
        label = _label(group)
        for dimension, amount in zip(DIMENSIONS, units, strict=True):
            samples.append(
                f'rg_resource_group_used_total{{group="{label}",dimension="{dimension}"}} '
                f"{_value(amount)}\n"
            )
    return _family("rg_resource_group_used_total", _USED_HELP, samples, "counter").encode()


class GroupStats:
    """Each group's latest figures, as the last report about it saw them.

    Reports record plain tuples (a report may touch thousands of groups, so this must cost
    next to nothing); the text is written when Prometheus scrapes, by `exposition`, not by
    prometheus_client's families: at PIP-82's scale (100,000 groups, 1.7 million samples)
    building a sample object per figure took 9 s a scrape, longer than Prometheus waits.
    """

    def __init__(self, clock: Callable[[], float], stale_after_s: float) -> None:
        self._clock = clock
        self._groups: dict[str, tuple[float, int, Sequence[GroupTotals]]] = {}
        self.stale_after_s = stale_after_s

    def record(self, group: str, reporters: int, totals: Sequence[GroupTotals]) -> None:
        """A group's reporters and totals, as one report saw them."""
        self._groups[group] = (self._clock(), reporters, totals)

    def touch(self, groups: Iterable[str]) -> None:
        """The groups' figures still hold (a report found nothing changed): not silent."""
        now = self._clock()
        known = self._groups
        for group in groups:
            if (figures := known.get(group)) is not None:
                known[group] = (now, *figures[1:])

    def latest(self) -> list[tuple[str, int, Sequence[GroupTotals]]]:
        """Each group's name, reporters and totals; groups silent too long are dropped."""
        horizon = self._clock() - self.stale_after_s
        for group in [g for g, (seen, _, _) in list(self._groups.items()) if seen < horizon]:
            self._groups.pop(group, None)
        return [(group, count, totals) for group, (_, count, totals) in list(self._groups.items())]

    def exposition(self) -> bytes:
        """The groups' figures in Prometheus' text format (as `generate_latest` writes
        them): four gauge families labelled by group, and by dimension but the reporters'."""
        figures: list[list[str]] = [[] for _ in _GROUP_FAMILIES]
        limits, demands, allocations = figures
        reporters: list[str] = []
        for group, count, totals in self.latest():
            label = _label(group)
            reporters.append(f'rg_resource_group_reporters{{group="{label}"}} {_value(count)}\n')
            for dimension, limit, demand, allocation in totals:
                labels = f'{{group="{label}",dimension="{_label(dimension)}"}} '
                limits.append(f"rg_resource_group_limit{labels}{_value(limit)}\n")
                demands.append(f"rg_resource_group_demand{labels}{_value(demand)}\n")
                allocations.append(f"rg_resource_group_allocation{labels}{_value(allocation)}\n")
        parts = [
            _family(f"rg_resource_group_{name}", text, samples)
            for (name, text), samples in zip(_GROUP_FAMILIES, figures, strict=True)
        ]
        parts.append(_family("rg_resource_group_reporters", _REPORTERS_HELP, reporters))
        return "".join(parts).encode()

    def modes_exposition(self, observing: Collection[str]) -> bytes:
        """``rg_resource_group_observe`` for the groups ``observing`` (1) and the others
        reports touched (0), and ``rg_resource_group_would_hold_back_ratio`` per dimension
        the observing groups limit, from the latest totals of those reports touched."""
        observe = set(observing)
        modes: list[str] = []
        holds: list[str] = []
        latest = {group: totals for group, _, totals in self.latest()}
        for group in sorted(observe | latest.keys()):
            label = _label(group)
            modes.append(f'rg_resource_group_observe{{group="{label}"}} {int(group in observe)}\n')
            if group not in observe:
                continue
            for dimension, _, demand, allocation in latest.get(group, ()):
                ratio = would_hold_back(demand, allocation)
                if ratio is not None:
                    labels = f'{{group="{label}",dimension="{_label(dimension)}"}} '
                    holds.append(
                        f"rg_resource_group_would_hold_back_ratio{labels}{_value(ratio)}\n"
                    )
        return (
            _family("rg_resource_group_observe", _OBSERVE_HELP, modes)
            + _family("rg_resource_group_would_hold_back_ratio", _HOLD_BACK_HELP, holds)
        ).encode()


def would_hold_back(demand: float, allocation: float) -> float | None:
    """``max(0, demand - allocation) / demand``; None where unlimited or nothing is wanted."""
    if allocation < 0 or not demand > 0:
        return None
    return max(0.0, demand - allocation) / demand
