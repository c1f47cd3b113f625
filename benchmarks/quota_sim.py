"""How well do reporters sharing a group's quota hold it, under each allocation algorithm?

    python -m benchmarks.quota_sim SCENARIO.json [--algorithm project|pulsar|static]
                                   [--trace OUT.csv] [--seed N] [--periodic-reports]
    python -m benchmarks.quota_sim --all [DIR] [--seed N] [--periodic-reports]

The first form simulates one scenario and prints its metrics as one JSON object; the second
runs every ``*.json`` scenario in DIR (default: ``benchmarks/scenarios``) with all three
algorithms and prints them side by side, with whether ``project`` beats each baseline and
its wins, ties and losses against each, per metric and in all.

Virtual time, no sleeping. Every reporter is a worker process as rgspark runs it, on the
simulation's fake clock: a real `rgspark` `NamespaceQuota` (its `TokenBucket` behind its
`Limiter`, and its demand estimators) and a real `Reporter`, whose `AdminClient` talks
through an ``httpx.MockTransport`` to the server below. Work is charged through
`NamespaceQuota.charge` in slices of 10 ms of work; a worker consumes at most its demand:
unthrottled it works through its demand without pause, throttled it waits what `charge`
says before its next slice. A worker process starts when its reporter joins, plus a
start-up delay under an eighth of an interval taken from a hash of its id and ``--seed``
(where its first task happened to start): it announces its traffic (`NamespaceQuota.use`),
reports at once (the start-up call that fetches the policy, demand still unknown), then
works. A worker whose demand comes back from 0 starts a task again: it announces it anew.
A reporter that leaves closes its `Reporter`, which releases its share at once.

Reports go out when the real reporter sends them: the simulation asks `Reporter.due_in`, the
decision the reporter thread makes, whenever the thread would look (at the time it says,
and when a task starts), and calls `Reporter.report` when it says 0. So reports come when
an answer asks for them, early when demand moved or a task started (an idle worker's claim
running out included) or the server pushed a change, never more often than the reporter
allows. The server pushes a change as its long poll on changes does (`app.quota.changes`),
`POLL_S` after it happened, through `Reporter.changed`: a quota change to every worker under
each algorithm, and under the project's a wake too (the group's wake moved: its shares
did). With ``--periodic-reports``, a reporter instead reports once per interval, whatever
the answers ask (and at once when a change is pushed). ``reports_per_reporter_s`` is the
load that puts on the server.

The server of each algorithm, for one group that limits ``publishMsgs`` (the other
dimensions unlimited):

- ``project``: the admin server's own report path (`benchmarks._store_server`), not a copy
  of it: each report is stored and answered by `app.quota.store.submit`, a release by
  `app.quota.reporters.release`, and four times an interval (and at least once a second)
  silent reporters are looked for as the server's upkeep loop does (`reporters.expire`),
  on a SQLite database in memory built by the migrations, in one server process's cache, at
  the simulation's time; a quota change is the admin update of the group. So the figures
  held, leases, summaries, falls counted in force until applied and wakes are the store's
  own. After each of these, the server reads what the long poll on changes reads (the admin
  generation and the group's wake): what moved is pushed as above.
- ``pulsar``: Pulsar's calculator, quota x own usage / total usage; the full quota when its
  own or the total usage is 0.
- ``static``: quota / number of reporters.

The baselines' server keeps the fresh reports as the store does (a reporter's usage and
demand are recorded anew only when one moved by 5%: `rgspark.wire.moved`; a reporter is
gone two intervals after the interval its answer held for; a released one at once), and
answers the reporting reporter only, to report again in an interval: no lease, no fall
counted in force, no wake.

All three run the same reporters, so only the server differs. Simultaneous events run in
this order: quota changes, leaves, joins, the server's look for silent reporters, reports
(by start-up delay), work.

Scenarios may give a reporter a ``"namespace"`` (default: ``default`` for all); the ideal is
then max-min fair among namespaces by their total demand, and within each namespace among
its reporters.

Metrics, over one-second windows ``[k, k+1)``, with the quota, demands and membership taken at
the window's start (the scenarios change them on whole seconds), as DESIGN.md section 7
defines them: the ideal is the max-min fair split of the quota over active reporters' demands
(namespaces first); ``max_overshoot_pct`` = max of (total consumed - quota) / quota, floored
at 0; ``utilization_pct`` = mean total consumed / quota over windows whose total demand >=
quota; ``steady_error_pct`` = mean |total consumed - min(quota, total demand)| / quota over
windows at least 3 intervals after any event; ``convergence_intervals``: per event, intervals
from the event to the start of the first window from which every reporter's consumption
stays within 5% of the quota of its ideal until the next event (null if it never does), the
worst of them; ``jain_fairness`` = Jain's index of consumed / ideal per reporter, averaged
over those steady windows. ``after_quota_notice`` repeats overshoot and utilization without
the windows within one report interval of a quota change: a change reaches each reporter
once the server pushes it (`POLL_S`, then a report), so no algorithm can act on it sooner,
and a cut shows in the plain figures for every one alike; ``utilization_capped_pct`` there
counts a window's consumption only up to the quota, so that overshooting windows do not
make up for short ones (`beats` compares that).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import heapq
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import httpx

# Before the server's modules, which import rgspark.wire.
try:
    from rgspark._admin import AdminClient
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import Reporter
    from rgspark.wire import DIMENSIONS, GRACE_INTERVALS, moved
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark._admin import AdminClient
    from rgspark._quota import NamespaceQuota
    from rgspark._reporter import Reporter
    from rgspark.wire import DIMENSIONS, GRACE_INTERVALS, moved

from app.config import Settings
from app.quota.fair import max_min_fair
from app.quota.history import WRITE_EVERY_S
from app.quota.tuning import POLL_S
from benchmarks._store_server import StoreServer

ALGORITHMS = ("project", "pulsar", "static")
BASELINES = ("pulsar", "static")
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
DEFAULT_NAMESPACE = "default"
NS = 1_000_000_000
SLICE_S = 0.01  # seconds of work between two charges
LEASE_S = Settings.model_fields["report_lease_seconds"].default  # the server's default
START_SPREAD = 0.125  # of an interval: the most a worker's start lags its join
MIN_RATE = 1e-3  # a TokenBucket needs a positive rate
TOLERANCE = 0.05  # of the quota: how close to its ideal a reporter counts as converged
SETTLE_INTERVALS = 3  # windows this long after an event are steady
TENANT = "sim"
KIND = "publish"
DIMENSION = "publishMsgs"  # the one the group limits; the others are unlimited
SERVER = "http://quota-sim"

# Same-moment events run in this order: the quota and membership first, then the server's
# look for silent reporters, then reports, then work.
_QUOTA, _LEAVE, _JOIN, _UPKEEP, _REPORT, _WORK = range(6)


@dataclass(frozen=True)
class Member:
    id: str
    join_s: float
    leave_s: float | None
    demand: tuple[tuple[float, float], ...]  # (from second, units per second), in order
    namespace: str = DEFAULT_NAMESPACE

    def demand_at(self, t_s: float) -> float:
        rate = 0.0
        for at_s, step in self.demand:
            if at_s > t_s:
                break
            rate = step
        return rate

    def active_at(self, t_s: float) -> bool:
        return self.join_s <= t_s and (self.leave_s is None or t_s < self.leave_s)


@dataclass(frozen=True)
class Scenario:
    name: str
    quota: float
    interval_s: float
    duration_s: float
    quota_changes: tuple[tuple[float, float], ...]
    members: tuple[Member, ...]

    @classmethod
    def load(cls, path: Path) -> Scenario:
        raw = json.loads(path.read_text())
        return cls(
            name=raw["name"],
            quota=float(raw["quota"]),
            interval_s=float(raw["report_interval_s"]),
            duration_s=float(raw["duration_s"]),
            quota_changes=tuple(
                sorted((float(c["at_s"]), float(c["quota"])) for c in raw["quota_changes"])
            ),
            members=tuple(
                Member(
                    id=str(r["id"]),
                    join_s=float(r["join_s"]),
                    leave_s=None if r["leave_s"] is None else float(r["leave_s"]),
                    demand=tuple(sorted((float(d["at_s"]), float(d["rate"])) for d in r["demand"])),
                    namespace=str(r.get("namespace") or DEFAULT_NAMESPACE),
                )
                for r in raw["reporters"]
            ),
        )

    def quota_at(self, t_s: float) -> float:
        quota = self.quota
        for at_s, value in self.quota_changes:
            if at_s <= t_s:
                quota = value
        return quota

    def events(self) -> dict[float, list[str]]:
        """What changes when: joins, leaves, demand and quota changes within the run."""
        found: dict[float, list[str]] = defaultdict(list)
        for m in self.members:
            found[m.join_s].append(f"join {m.id}")
            if m.leave_s is not None:
                found[m.leave_s].append(f"leave {m.id}")
            for at_s, rate in m.demand:
                if at_s > m.join_s and (m.leave_s is None or at_s < m.leave_s):
                    found[at_s].append(f"demand {m.id} {rate:g}")
        for at_s, quota in self.quota_changes:
            found[at_s].append(f"quota {quota:g}")
        return {t: found[t] for t in sorted(found) if t < self.duration_s}


# --- the servers -----------------------------------------------------------------------------


class _Server(Protocol):
    """What the simulation needs of a server: its ``/quota/v1`` as an ``httpx.MockTransport``
    handler, the reports each reporter sent, the admin's quota change, and ``on_change``,
    called when the workers' long poll on changes would answer (``admin``: the admin state
    changed; else a group's shares did)."""

    received: Counter[str]
    on_change: Callable[[bool], None]

    def __call__(self, request: httpx.Request) -> httpx.Response: ...

    def set_quota(self, quota: float) -> None: ...


class Held(NamedTuple):
    """A reporter's figures as a baseline's server keeps them, in units per second."""

    usage: float
    demand: float


class Reply(NamedTuple):
    """A baseline's answer to the reporter that reported."""

    rate: float
    fallback: float


# (quota, each live reporter's held figures, the reporter answered) -> its reply
Answer = Callable[[float, Mapping[str, Held], str], Reply]


def _pulsar(quota: float, held: Mapping[str, Held], reporter: str) -> Reply:
    total = sum(figures.usage for figures in held.values())
    own = held[reporter].usage
    rate = quota if own == 0 or total == 0 else quota * own / total
    return Reply(rate, quota / len(held))


def _static(quota: float, held: Mapping[str, Held], reporter: str) -> Reply:
    return Reply(quota / len(held), quota / len(held))


BASELINE_ANSWERS: dict[str, Answer] = {"pulsar": _pulsar, "static": _static}


class _Baseline:
    """The admin server's ``/quota/v1`` for one group as a baseline would run it, as an
    ``httpx.MockTransport`` handler: each reporter's latest figures held as the store holds
    them, unless one moved; reporters forgotten once released, or silent for the interval
    their answer held and two more; the reporting one answered with the baseline's rate for
    `DIMENSION`, to report again in an interval."""

    def __init__(
        self, answer: Answer, quota: float, interval_s: float, clock: Callable[[], int]
    ) -> None:
        self.answer = answer
        self.quota = quota
        self.interval_s = interval_s
        self.clock = clock
        self.on_change: Callable[[bool], None] = lambda admin: None
        self.held: dict[str, Held] = {}
        self.until_ns: dict[str, int] = {}
        self.received: Counter[str] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        reporter = request.url.path.split("/")[4]
        if request.method == "DELETE":
            self.held.pop(reporter, None)
            return httpx.Response(204)
        self.received[reporter] += 1
        body = json.loads(request.content)
        ((key, figures),) = body["namespaces"].items()
        return httpx.Response(200, json=self._report(reporter, key, figures, body["intervalMs"]))

    def set_quota(self, quota: float) -> None:
        self.quota = quota
        self.on_change(True)

    def _report(
        self, reporter: str, key: str, figures: dict[str, Any], interval_ms: int
    ) -> dict[str, Any]:
        now = self.clock()
        self.held = {r: held for r, held in self.held.items() if self.until_ns[r] >= now}
        mine = figures.get(DIMENSION, {"used": 0, "demand": 0.0})
        fresh = Held(mine["used"] * 1000 / interval_ms, float(mine["demand"]))
        stored = self.held.get(reporter)
        if stored is None or moved(stored.usage, fresh.usage) or moved(stored.demand, fresh.demand):
            self.held[reporter] = fresh
        rate, fallback = self.answer(self.quota, self.held, reporter)
        self.until_ns[reporter] = now + round((1 + GRACE_INTERVALS) * self.interval_s * NS)
        unlimited = dict.fromkeys(DIMENSIONS, -1.0)
        interval_ms = max(1, round(self.interval_s * 1000))
        return {
            "accepted": True,
            "reportIntervalMs": interval_ms,
            "reportPeriodMs": interval_ms,
            "leaseMs": interval_ms,
            "confirmFalls": False,
            "namespaces": {
                key: {
                    "resourceGroup": TENANT,
                    "limits": None,
                    "allocations": {**unlimited, DIMENSION: max(rate, MIN_RATE)},
                    "fallbackAllocations": {**unlimited, DIMENSION: max(fallback, MIN_RATE)},
                }
            },
        }


# --- the simulation -------------------------------------------------------------------------


@dataclass
class _Worker:
    """One reporter's process: rgspark's quota and reporter, and what it did when."""

    member: Member
    start_ns: int  # its join, plus where its first task happened to start
    quota: NamespaceQuota | None = None
    reporter: Reporter | None = None
    active: bool = False
    idle: bool = False  # no task running: its demand is 0
    looking: int = 0  # the generation of the one reporter-thread wake-up that counts
    rate: float = 0.0
    rate_since: int = 0
    consumed: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    allocated: dict[int, float] = field(default_factory=lambda: defaultdict(float))


class Simulation:
    def __init__(
        self, scenario: Scenario, algorithm: str, seed: int = 0, *, adaptive: bool = True
    ) -> None:
        self.scenario = scenario
        self.adaptive = adaptive
        self.now = 0
        self.end = round(scenario.duration_s * NS)
        self.interval = round(scenario.interval_s * NS)
        self.store: StoreServer | None = None
        self.server: _Server
        if algorithm == "project":
            self.server = self.store = StoreServer(
                scenario.quota,
                scenario.interval_s,
                self.wall_clock,
                tenant=TENANT,
                spaces=[m.namespace for m in scenario.members],
                max_lease_s=LEASE_S,
            )
        else:
            answer = BASELINE_ANSWERS[algorithm]
            self.server = _Baseline(answer, scenario.quota, scenario.interval_s, self.clock)
        self.server.on_change = self._push
        spread = round(self.interval * START_SPREAD)
        self.workers = [
            _Worker(m, round(m.join_s * NS) + _offset_ns(m.id, seed, spread))
            for m in scenario.members
        ]
        self._queue: list[tuple[int, int, int, int, Callable[[], None]]] = []
        self._seq = 0

    def clock(self) -> int:
        """Monotonic nanoseconds, for the buckets and demand estimators."""
        return self.now

    def wall_clock(self) -> float:
        """Seconds since the epoch, for the reporters: the simulation starts at 0."""
        return self.now / NS

    def run(self) -> Simulation:
        for at_s, quota in self.scenario.quota_changes:
            self._at(round(at_s * NS), _QUOTA, 0, partial(self.server.set_quota, quota))
        for w in self.workers:
            self._at(w.start_ns, _JOIN, w.start_ns, partial(self._join, w))
            if w.member.leave_s is not None:
                self._at(round(w.member.leave_s * NS), _LEAVE, 0, partial(self._leave, w))
        if self.store is not None:
            # As the server's upkeep loop (`app.api.quota.keep_up`) looks for silent reporters.
            every = round(min(WRITE_EVERY_S, self.scenario.interval_s / 4) * NS)
            for at in range(every, self.end, every):
                self._at(at, _UPKEEP, 0, self.store.expire)
        try:
            while self._queue and self._queue[0][0] < self.end:
                self.now, *_, action = heapq.heappop(self._queue)
                action()
        finally:
            if self.store is not None:
                self.store.close()
        self.now = self.end
        for w in self.workers:
            if w.active:
                self._set_rate(w, w.rate)
        return self

    def _at(self, time_ns: int, order: int, tiebreak: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ns, order, tiebreak, self._seq, action))

    def _push(self, admin: bool) -> None:
        """The server answers every worker's long poll on changes (`app.quota.changes`)
        once its poll read the change, within `POLL_S`."""
        at = self.now + round(POLL_S * NS)
        for w in self.workers:
            if w.active and w.reporter is not None:
                self._at(at, _REPORT, w.start_ns, partial(self._pushed, w, admin))

    def _pushed(self, w: _Worker, admin: bool) -> None:
        if w.active and w.reporter is not None:
            w.reporter.changed(admin=admin)
            self._look(w)

    def _join(self, w: _Worker) -> None:
        """As `rgspark._client._start` starts a worker's runtime on its first task."""
        if w.member.leave_s is not None and self.now >= round(w.member.leave_s * NS):
            return
        w.quota = NamespaceQuota(TENANT, w.member.namespace, clock=self.clock)
        admin = AdminClient(SERVER, transport=httpx.MockTransport(self.server))
        w.reporter = Reporter(admin, [w.quota], reporter_id=w.member.id, wall_clock=self.wall_clock)
        w.active = True
        w.rate_since = self.now
        w.quota.use(KIND)
        self._report(w)
        self._start_slice(w)

    def _leave(self, w: _Worker) -> None:
        if w.reporter is None or not w.active:
            return
        self._set_rate(w, 0.0)
        w.active = False
        w.reporter.close()  # releases its share at once

    def _look(self, w: _Worker, generation: int | None = None) -> None:
        """The reporter thread wakes: reports if `Reporter.due_in` says so, then waits."""
        if not w.active or w.reporter is None or generation not in (None, w.looking):
            return
        seconds = w.reporter.due_in(self.wall_clock()) if self.adaptive else 0.0
        if seconds <= 0:
            self._report(w)
        else:
            self._wake_in(w, seconds)

    def _report(self, w: _Worker) -> None:
        assert w.reporter is not None and w.quota is not None
        w.reporter.report()
        self._set_rate(w, w.quota.rate(DIMENSION) or 0.0)
        if self.adaptive:
            self._wake_in(w, w.reporter.due_in(self.wall_clock()))
        else:
            self._wake_in(w, self.scenario.interval_s)

    def _wake_in(self, w: _Worker, seconds: float) -> None:
        w.looking += 1
        # At least a nanosecond on: a due time a rounding error away is then reached.
        at = self.now + max(1, round(seconds * NS))
        self._at(at, _REPORT, w.start_ns, partial(self._look, w, w.looking))

    def _start_slice(self, w: _Worker) -> None:
        if not w.active or w.quota is None:
            return
        demand = w.member.demand_at(self.now / NS)
        if demand <= 0:
            w.idle = True
            self._at(self.now + round(SLICE_S * NS), _WORK, 0, lambda: self._start_slice(w))
            return
        if w.idle:  # a task starts: it announces its traffic, which wakes the reporter
            w.idle = False
            w.quota.use(KIND)
            if self.adaptive:
                self._look(w)
        rate = w.quota.rate(DIMENSION)
        units = min(demand, math.inf if rate is None else rate) * SLICE_S
        done = self.now + max(1, round(units / demand * NS))
        self._at(done, _WORK, 0, lambda: self._charge(w, units))

    def _charge(self, w: _Worker, units: float) -> None:
        if not w.active or w.quota is None:
            return
        wait_s = w.quota.charge(KIND, units, 0)
        w.consumed[self.now // NS] += units
        self._at(self.now + round(wait_s * NS), _WORK, 0, lambda: self._start_slice(w))

    def _set_rate(self, w: _Worker, rate: float) -> None:
        """Credit the rate in force so far to the windows it covered, then change it."""
        start, end = w.rate_since, self.now
        while start < end:
            window = start // NS
            stop = min(end, (window + 1) * NS)
            w.allocated[window] += w.rate * (stop - start) / NS
            start = stop
        w.rate, w.rate_since = rate, self.now

    def reports_per_reporter_s(self) -> float:
        """Reports per second per reporter: the load on the server, 1 / interval at least."""
        seconds = sum(
            min(math.inf if m.leave_s is None else m.leave_s, self.scenario.duration_s) - m.join_s
            for m in self.scenario.members
            if m.join_s < self.scenario.duration_s
        )
        return sum(self.server.received.values()) / seconds if seconds > 0 else 0.0

    def windows(self) -> list[Window]:
        scenario = self.scenario
        result = []
        for k in range(math.ceil(scenario.duration_s)):
            active = [w for w in self.workers if w.member.active_at(k)]
            span = min(1.0, scenario.duration_s - k)
            result.append(
                Window(
                    start_s=k,
                    quota=scenario.quota_at(k),
                    demand={w.member.id: w.member.demand_at(k) for w in active},
                    consumed={w.member.id: w.consumed.get(k, 0.0) for w in active},
                    allocated={w.member.id: w.allocated.get(k, 0.0) / span for w in active},
                    total=sum(w.consumed.get(k, 0.0) for w in self.workers),
                    namespaces={w.member.id: w.member.namespace for w in active},
                )
            )
        return result


def _offset_ns(reporter: str, seed: int, spread_ns: int) -> int:
    """Where a reporter's first task happened to start after its join, in [0, spread)."""
    digest = hashlib.sha256(f"{seed}:{reporter}".encode()).digest()
    return int.from_bytes(digest[:8], "big") * spread_ns // 2**64


# --- metrics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    start_s: int
    quota: float
    demand: dict[str, float]
    consumed: dict[str, float]
    allocated: dict[str, float]
    total: float
    namespaces: Mapping[str, str] = field(default_factory=dict)
    """Each reporter's namespace; one not named is in `DEFAULT_NAMESPACE`. `metrics` names
    them from the scenario when a window names none."""

    def ideal(self) -> dict[str, float]:
        """The max-min fair split of the quota among namespaces by their total demand, then
        within each namespace among its reporters by theirs."""
        members: dict[str, list[str]] = defaultdict(list)
        for reporter in self.demand:
            members[self.namespaces.get(reporter, DEFAULT_NAMESPACE)].append(reporter)
        groups = list(members.values())
        parts = max_min_fair(self.quota, [sum(self.demand[i] for i in ids) for ids in groups])
        shares: dict[str, float] = {}
        for part, ids in zip(parts, groups, strict=True):
            shares.update(zip(ids, max_min_fair(part, [self.demand[i] for i in ids]), strict=True))
        return {reporter: shares[reporter] for reporter in self.demand}

    def converged(self) -> bool:
        ideal = self.ideal()
        return all(abs(self.consumed[i] - ideal[i]) <= TOLERANCE * self.quota for i in self.demand)


def metrics(scenario: Scenario, windows: Sequence[Window]) -> dict[str, Any]:
    """DESIGN.md section 7's metrics of one run; see the module's docstring."""
    placed = {m.id: m.namespace for m in scenario.members}
    windows = [
        w
        if w.namespaces
        else replace(w, namespaces={i: placed.get(i, DEFAULT_NAMESPACE) for i in w.demand})
        for w in windows
    ]
    events = scenario.events()
    interval = scenario.interval_s
    steady = [
        w
        for w in windows
        if all(e <= w.start_s - SETTLE_INTERVALS * interval or e >= w.start_s + 1 for e in events)
    ]
    notice = {
        k
        for at_s, _ in scenario.quota_changes
        for k in range(math.floor(at_s), math.ceil(at_s + interval))
    }
    after_notice = [w for w in windows if w.start_s not in notice]
    by_event = _convergence(events, windows, interval)
    worst: float | None = 0.0
    for entry in by_event:
        intervals = entry["intervals"]
        worst = None if worst is None or intervals is None else max(worst, intervals)
    return {
        "max_overshoot_pct": _overshoot(windows),
        "utilization_pct": _utilization(windows),
        "steady_error_pct": _mean(
            abs(w.total - min(w.quota, sum(w.demand.values()))) / w.quota * 100 for w in steady
        ),
        "convergence_intervals": worst,
        "jain_fairness": _mean(j for j in map(_jain, steady) if j is not None),
        "after_quota_notice": {
            "max_overshoot_pct": _overshoot(after_notice),
            "utilization_pct": _utilization(after_notice),
            "utilization_capped_pct": _utilization(after_notice, capped=True),
        },
        "convergence_by_event": by_event,
        "windows": len(windows),
        "steady_windows": len(steady),
    }


def _overshoot(windows: Iterable[Window]) -> float:
    return max((max(0.0, (w.total - w.quota) / w.quota * 100) for w in windows), default=0.0)


def _utilization(windows: Iterable[Window], *, capped: bool = False) -> float | None:
    return _mean(
        (min(w.total, w.quota) if capped else w.total) / w.quota * 100
        for w in windows
        if sum(w.demand.values()) >= w.quota
    )


def _convergence(
    events: dict[float, list[str]], windows: Sequence[Window], interval_s: float
) -> list[dict[str, Any]]:
    times = list(events)
    result = []
    for n, at_s in enumerate(times):
        until = times[n + 1] if n + 1 < len(times) else math.inf
        mine = [w for w in windows if w.start_s >= at_s and w.start_s + 1 <= until]
        settled: float | None = None
        for w in reversed(mine):
            if not w.converged():
                break
            settled = w.start_s
        intervals = None if settled is None else (settled - at_s) / interval_s
        result.append({"at_s": at_s, "events": events[at_s], "intervals": intervals})
    return result


def _jain(window: Window) -> float | None:
    ideal = window.ideal()
    ratios = [window.consumed[i] / ideal[i] for i in ideal if ideal[i] > 0]
    squares = sum(x * x for x in ratios)
    return sum(ratios) ** 2 / (len(ratios) * squares) if squares else None


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


# --- comparison -----------------------------------------------------------------------------

# Per metric, as a "lower is better" figure: differences within TIE are noise (slicing, the
# reporters' phases, whole windows), and GOOD is about half of DESIGN.md's bar (overshoot 5%,
# utilization 98-102%, convergence 3 intervals) or, without a bar, as good as noise allows.
TIE = {"overshoot": 1.0, "shortfall": 0.5, "steady_error": 0.5, "convergence": 1.0, "jain": 0.005}
GOOD = {"overshoot": 2.5, "shortfall": 1.0, "steady_error": 0.5, "convergence": 1.0, "jain": 0.005}


def beats(project: dict[str, Any], baseline: dict[str, Any]) -> dict[str, bool]:
    """Per metric, whether ``project`` beats ``baseline``: better, or as good and good.

    Better means lower by more than `TIE` for overshoot (after the quota notice), steady
    error and convergence intervals (null, never converged, is the worst); higher for Jain's
    index; and for utilization, a smaller shortfall below 100% of the capped utilization
    (after the quota notice), so that overshooting windows, which the overshoot figure
    already counts, do not make up for windows short of the quota. Where the two are within
    `TIE` of each other, they are as good as each other, and ``project`` wins if it is
    within `GOOD`: a tie is fine where both are good.
    """
    theirs = _comparable(baseline)
    return {
        name: _better(ours, theirs[name][0], metric)
        for name, (ours, metric) in _comparable(project).items()
    }


def outcomes(project: dict[str, Any], baseline: dict[str, Any]) -> dict[str, str | None]:
    """Per metric, ``"win"``, ``"tie"`` or ``"loss"`` for ``project`` against ``baseline``,
    on the figures `beats` compares: a tie is a difference within `TIE`, however good or
    bad both are. None where the metric was not measured in the scenario."""
    theirs = _comparable(baseline)
    result: dict[str, str | None] = {}
    for name, (ours, metric) in _comparable(project).items():
        other = theirs[name][0]
        if ours is None or other is None:
            result[name] = None
        elif ours < other - TIE[metric]:
            result[name] = "win"
        elif ours > other + TIE[metric]:
            result[name] = "loss"
        else:
            result[name] = "tie"
    return result


def scorecard(verdicts: Mapping[str, Mapping[str, str | None]]) -> dict[str, Any]:
    """Wins, ties and losses over scenarios (`outcomes` per scenario), per metric and in all."""
    per_metric: dict[str, Counter[str]] = defaultdict(Counter)
    for by_metric in verdicts.values():
        for name, outcome in by_metric.items():
            counter = per_metric[name]  # listed even when never measured
            if outcome is not None:
                counter[outcome] += 1
    counts = {name: _tally(counter) for name, counter in per_metric.items()}
    total = _tally(sum(per_metric.values(), Counter()))
    return {"per_metric": counts, "total": total}


def _tally(counter: Counter[str]) -> dict[str, int]:
    return {"wins": counter["win"], "ties": counter["tie"], "losses": counter["loss"]}


def _comparable(result: dict[str, Any]) -> dict[str, tuple[float | None, str]]:
    """Per metric, its figure as "lower is better", and its `TIE` key."""
    notice = result["after_quota_notice"]
    return {
        "max_overshoot_pct": (notice["max_overshoot_pct"], "overshoot"),
        "utilization_pct": (_shortfall(notice["utilization_capped_pct"]), "shortfall"),
        "steady_error_pct": (result["steady_error_pct"], "steady_error"),
        "convergence_intervals": (_or_inf(result["convergence_intervals"]), "convergence"),
        "jain_fairness": (_shortfall(result["jain_fairness"], 1.0), "jain"),
    }


def _better(ours: float | None, theirs: float | None, metric: str) -> bool:
    if ours is None or theirs is None:  # not measured in this scenario: nothing to beat
        return ours is None or theirs is None
    tie, good = TIE[metric], GOOD[metric]
    return ours < theirs - tie or (ours <= theirs + tie and ours <= good)


def _shortfall(value: float | None, full: float = 100.0) -> float | None:
    return None if value is None else max(full - value, 0.0)


def _or_inf(intervals: float | None) -> float:
    return math.inf if intervals is None else intervals


# --- running --------------------------------------------------------------------------------


def simulate(
    scenario: Scenario,
    algorithm: str,
    *,
    seed: int = 0,
    adaptive: bool = True,
    trace: Path | None = None,
) -> dict[str, Any]:
    simulation = Simulation(scenario, algorithm, seed, adaptive=adaptive).run()
    windows = simulation.windows()
    if trace is not None:
        write_trace(trace, windows)
    return {
        "scenario": scenario.name,
        "algorithm": algorithm,
        **rounded(metrics(scenario, windows)),
        "reports_per_reporter_s": round(simulation.reports_per_reporter_s(), 3),
    }


def write_trace(path: Path, windows: Sequence[Window]) -> None:
    """One row per reporter per window: t_s,reporter,quota,demand_rate,allocated_rate,consumed.

    Quota and demand are those at the window's start; the allocated rate is the rate the
    reporter enforced, averaged over the window; consumed is what it consumed in it.
    """
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["t_s", "reporter", "quota", "demand_rate", "allocated_rate", "consumed"])
        for w in windows:
            for reporter in w.demand:
                writer.writerow(
                    [
                        w.start_s,
                        reporter,
                        f"{w.quota:g}",
                        f"{w.demand[reporter]:g}",
                        f"{w.allocated[reporter]:.3f}",
                        f"{w.consumed[reporter]:.3f}",
                    ]
                )


def compare_all(directory: Path, *, seed: int = 0, adaptive: bool = True) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        scenario = Scenario.load(path)
        results[scenario.name] = {
            a: simulate(scenario, a, seed=seed, adaptive=adaptive) for a in ALGORITHMS
        }
    verdicts = {
        name: {b: beats(runs["project"], runs[b]) for b in BASELINES}
        for name, runs in results.items()
    }
    versus = {
        b: {name: outcomes(runs["project"], runs[b]) for name, runs in results.items()}
        for b in BASELINES
    }
    return {
        "benchmark": "quota_sim",
        "scenarios_dir": str(directory),
        "seed": seed,
        "adaptive_reports": adaptive,
        "results": results,
        "project_beats": verdicts,
        "project_beats_all": all(
            all(v.values()) for per_baseline in verdicts.values() for v in per_baseline.values()
        ),
        "project_vs": {
            b: {**scorecard(by_scenario), "by_scenario": by_scenario}
            for b, by_scenario in versus.items()
        },
    }


def rounded(value: Any) -> Any:
    """Floats rounded to 4 places, in nested dicts and lists too: JSON for people."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", type=Path, help="a scenario JSON file")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="project")
    parser.add_argument("--trace", type=Path, help="write the per-window CSV trace here")
    parser.add_argument(
        "--all",
        nargs="?",
        const=SCENARIOS,
        type=Path,
        metavar="DIR",
        help=f"run every scenario in DIR with every algorithm (default DIR: {SCENARIOS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="varies the reporters' phases")
    parser.add_argument(
        "--periodic-reports",
        action="store_true",
        help="reporters report once per interval only: not when their demand moves, and not "
        "sooner when the server asks",
    )
    args = parser.parse_args(argv)
    adaptive = not args.periodic_reports
    if (args.scenario is None) == (args.all is None):
        parser.error("give either a scenario file or --all")
    if args.all is not None:
        if args.trace is not None:
            parser.error("--trace goes with a single scenario")
        print(json.dumps(compare_all(args.all, seed=args.seed, adaptive=adaptive), indent=2))
    else:
        scenario = Scenario.load(args.scenario)
        print(
            json.dumps(
                simulate(
                    scenario,
                    args.algorithm,
                    seed=args.seed,
                    adaptive=adaptive,
                    trace=args.trace,
                ),
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
