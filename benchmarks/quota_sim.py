"""How well do reporters sharing a group's quota hold it, under each allocation algorithm?

    python -m benchmarks.quota_sim SCENARIO.json [--algorithm project|pulsar|static]
                                   [--trace OUT.csv] [--seed N] [--periodic-reports]
    python -m benchmarks.quota_sim --all [DIR] [--seed N] [--periodic-reports]

The first form simulates one scenario and prints its metrics as one JSON object; the second
runs every ``*.json`` scenario in DIR (default: ``benchmarks/scenarios``) with all three
algorithms and prints them side by side, with whether ``project`` beats each baseline.

Virtual time, no sleeping. Every reporter is a worker process as rgspark runs it: the real
`TokenBucket` (on the simulation's clock) behind the real `Limiter`, charged in slices of
10 ms of work, and the real demand estimator (its window an eighth of an interval). A worker
consumes at most its demand: unthrottled it works through its demand without pause;
throttled it waits what `Limiter.charge` says before its next slice. The server side runs
the algorithm on the reports fresh at that moment, as the store holds them (a reporter's
usage and demand are recorded anew only when one moved by 5% or more: the allocator's "Held
figures"), and answers the reporting reporter only:

- ``project``: `app.quota.allocator.plan`: the grant, and when to report next.
- ``pulsar``: Pulsar's calculator, quota x own usage / total usage; the full quota when its
  own or the total usage is 0.
- ``static``: quota / number of reporters.

All three run the same reporters, so only the server's answer differs: each rate is applied
with `TokenBucket.set_rate(rate, capacity)`, capacity a tenth of a second of the rate, and a
new bucket starts empty (`app.quota.allocator` says why).

Reporting is staggered, as in production: a reporter reports when it joins (its startup call,
which fetches the policy; its demand is then unknown, `math.inf`), then on its own period
``report_interval_s`` at a phase in (0, interval] taken from a hash of its id (and ``--seed``),
standing in for the moment its reporter thread happened to start. Each reporter picks up a
new allocation only at its own report, so others run at old ones meanwhile. A reporter that
leaves releases its share at once, as rgspark does at exit. Simultaneous reports are served
in phase order. Reports are adaptive unless ``--periodic-reports``: a reporter also reports
when an answer asks for an earlier report (``project`` asks while a reporter waits for
headroom or is new), and when its demand moved by more than 10% since its last report, as
PIP-82's brokers do, looking every eighth of an interval and at most once a quarter
interval. Either kind adds a report without moving the period. ``reports_per_reporter_s``
is the load that puts on the server.

Metrics, over one-second windows ``[k, k+1)``, with the quota, demands and membership taken at
the window's start (the scenarios change them on whole seconds), as DESIGN.md section 7
defines them: the ideal is the max-min fair split of the quota over active reporters' demands;
``max_overshoot_pct`` = max of (total consumed - quota) / quota, floored at 0;
``utilization_pct`` = mean total consumed / quota over windows whose total demand >= quota;
``steady_error_pct`` = mean |total consumed - min(quota, total demand)| / quota over windows
at least 3 intervals after any event; ``convergence_intervals``: per event, intervals from the
event to the start of the first window from which every reporter's consumption stays within
5% of the quota of its ideal until the next event (null if it never does), the worst of them;
``jain_fairness`` = Jain's index of consumed / ideal per reporter, averaged over those steady
windows. ``after_quota_notice`` repeats overshoot and utilization without the windows within
one report interval of a quota change: a change reaches each reporter at its next report, so
no algorithm can act on it sooner, and a cut shows in the plain figures for every one alike;
``utilization_capped_pct`` there counts a window's consumption only up to the quota, so that
overshooting windows do not make up for short ones (`beats` compares that).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import heapq
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from app.quota.allocator import BURST_S, Report, moved, plan
from app.quota.fair import max_min_fair

try:
    from rgspark import Limiter, TokenBucket
    from rgspark._demand import DemandEstimator
except ImportError:  # a source checkout where the package is not installed
    sys.modules.pop("rgspark", None)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "spark"))
    from rgspark import Limiter, TokenBucket
    from rgspark._demand import DemandEstimator

ALGORITHMS = ("project", "pulsar", "static")
BASELINES = ("pulsar", "static")
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
NS = 1_000_000_000
SLICE_S = 0.01  # seconds of work between two charges
MIN_RATE = 1e-3  # a TokenBucket needs a positive rate
CHANGE = 0.10  # a move in demand that makes a reporter report early (PIP-82's 10%)
TOLERANCE = 0.05  # of the quota: how close to its ideal a reporter counts as converged
SETTLE_INTERVALS = 3  # windows this long after an event are steady

# Same-moment events run in this order: the quota and membership first, then reports, then work.
_QUOTA, _LEAVE, _JOIN, _REPORT, _WORK = range(5)


@dataclass(frozen=True)
class Member:
    id: str
    join_s: float
    leave_s: float | None
    demand: tuple[tuple[float, float], ...]  # (from second, units per second), in order

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


# --- the server's answer: (rate, seconds until the next report) -----------------------------

Answer = Callable[[float, Sequence[Report], str, float], tuple[float, float]]


def _project(
    quota: float, reports: Sequence[Report], reporter: str, interval_s: float
) -> tuple[float, float]:
    grant = plan(quota, reports)[reporter]
    return grant.rate, grant.report_after(interval_s)


def _pulsar(
    quota: float, reports: Sequence[Report], reporter: str, interval_s: float
) -> tuple[float, float]:
    total = sum(r.usage for r in reports)
    own = next(r.usage for r in reports if r.reporter == reporter)
    return (quota if own == 0 or total == 0 else quota * own / total), interval_s


def _static(
    quota: float, reports: Sequence[Report], reporter: str, interval_s: float
) -> tuple[float, float]:
    return quota / len(reports), interval_s


ANSWERS: dict[str, Answer] = {"project": _project, "pulsar": _pulsar, "static": _static}


# --- the simulation -------------------------------------------------------------------------


class _Worker:
    """One reporter's process: its bucket, limiter, estimator and what it was granted."""

    def __init__(self, member: Member, phase_ns: int) -> None:
        self.member = member
        self.phase_ns = phase_ns
        self.active = False
        self.bucket: TokenBucket | None = None
        self.limiter = Limiter()
        self.estimator: DemandEstimator | None = None
        self.rate = 0.0
        self.rate_since = 0
        self.reported_at = 0
        self.reported_demand = math.inf
        self.generation = 0  # of the one report event that is due
        self.reports = 0
        self.consumed: dict[int, float] = defaultdict(float)
        self.allocated: dict[int, float] = defaultdict(float)  # rate x seconds, per window


class Simulation:
    def __init__(
        self, scenario: Scenario, algorithm: str, seed: int = 0, *, adaptive: bool = True
    ) -> None:
        self.scenario = scenario
        self.adaptive = adaptive
        self.answer = ANSWERS[algorithm]
        self.now = 0
        self.end = round(scenario.duration_s * NS)
        self.interval = round(scenario.interval_s * NS)
        self.quota = scenario.quota
        self.reports: dict[str, Report] = {}
        self.workers = [_Worker(m, _phase_ns(m.id, seed, self.interval)) for m in scenario.members]
        self._queue: list[tuple[int, int, int, int, Callable[[], None]]] = []
        self._seq = 0

    def clock(self) -> int:
        return self.now

    def run(self) -> Simulation:
        for at_s, quota in self.scenario.quota_changes:
            self._at(round(at_s * NS), _QUOTA, 0, partial(self._set_quota, quota))
        for w in self.workers:
            self._at(round(w.member.join_s * NS), _JOIN, w.phase_ns, partial(self._join, w))
            if w.member.leave_s is not None:
                self._at(round(w.member.leave_s * NS), _LEAVE, 0, partial(self._leave, w))
        while self._queue and self._queue[0][0] < self.end:
            self.now, *_, action = heapq.heappop(self._queue)
            action()
        self.now = self.end
        for w in self.workers:
            if w.active:
                self._set_rate(w, w.rate)
        return self

    def _at(self, time_ns: int, order: int, tiebreak: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ns, order, tiebreak, self._seq, action))

    def _set_quota(self, quota: float) -> None:
        self.quota = quota

    def _join(self, w: _Worker) -> None:
        w.active = True
        w.estimator = DemandEstimator(recent_s=self.scenario.interval_s / 8, clock=self.clock)
        self._report(w)
        self._start_slice(w)
        if self.adaptive:
            self._at(self.now + self.interval // 8, _REPORT, w.phase_ns, lambda: self._watch(w))

    def _leave(self, w: _Worker) -> None:
        self._set_rate(w, 0.0)
        w.active = False
        del self.reports[w.member.id]

    def _watch(self, w: _Worker) -> None:
        """Report early when demand moved by over `CHANGE` since the last report."""
        if not w.active or w.estimator is None:
            return
        if self.now - w.reported_at >= self.interval // 4:
            before, now = w.reported_demand, w.estimator.demand()
            if abs(now - before) > CHANGE * max(now, before) or math.isinf(before):
                self._report(w)
        self._at(self.now + self.interval // 8, _REPORT, w.phase_ns, lambda: self._watch(w))

    def _report(self, w: _Worker, generation: int | None = None) -> None:
        if not w.active or w.estimator is None or generation not in (None, w.generation):
            return
        sample = w.estimator.report()
        w.reported_at, w.reported_demand = self.now, sample.demand
        w.reports += 1
        usage = sample.used / sample.elapsed_s if sample.elapsed_s > 0 else 0.0
        demand = sample.demand
        stored = self.reports.get(w.member.id)
        if stored is not None and not (moved(stored.usage, usage) or moved(stored.demand, demand)):
            usage, demand = stored.usage, stored.demand  # held, as the store holds them
        current = w.rate if w.bucket is not None else None
        report = Report(w.member.id, usage, demand, current)
        self.reports[w.member.id] = report
        rate, after_s = self.answer(
            self.quota, list(self.reports.values()), w.member.id, self.scenario.interval_s
        )
        if not self.adaptive:
            after_s = self.scenario.interval_s
        rate = max(rate, MIN_RATE)
        self.reports[w.member.id] = replace(report, allocation=rate)
        self._set_rate(w, rate)
        if w.bucket is None:
            w.bucket = TokenBucket(rate, rate * BURST_S, 0, clock=self.clock)
        else:
            w.bucket.set_rate(rate, rate * BURST_S)
        w.generation += 1
        self._at(
            self._next_report(w, round(after_s * NS)),
            _REPORT,
            w.phase_ns,
            partial(self._report, w, w.generation),
        )

    def _next_report(self, w: _Worker, after_ns: int) -> int:
        first = round(w.member.join_s * NS) + w.phase_ns
        ticks = max(0, (self.now - first) // self.interval + 1)
        tick = first + ticks * self.interval
        return min(tick, self.now + after_ns)

    def _start_slice(self, w: _Worker) -> None:
        if not w.active or w.bucket is None:
            return
        demand = w.member.demand_at(self.now / NS)
        if demand <= 0:
            self._at(self.now + round(SLICE_S * NS), _WORK, 0, lambda: self._start_slice(w))
            return
        units = min(demand, w.bucket.rate) * SLICE_S
        done = self.now + max(1, round(units / demand * NS))
        self._at(done, _WORK, 0, lambda: self._charge(w, units))

    def _charge(self, w: _Worker, units: float) -> None:
        if not w.active or w.bucket is None or w.estimator is None:
            return
        wait_s = w.limiter.charge({w.bucket: units})
        w.estimator.record_charged(units, wait_s)
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
        return sum(w.reports for w in self.workers) / seconds if seconds > 0 else 0.0

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
                )
            )
        return result


def _phase_ns(reporter: str, seed: int, interval_ns: int) -> int:
    """A reporter's report phase in (0, interval]: where its period happened to start."""
    digest = hashlib.sha256(f"{seed}:{reporter}".encode()).digest()
    return interval_ns - int.from_bytes(digest[:8], "big") * interval_ns // 2**64


# --- metrics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    start_s: int
    quota: float
    demand: dict[str, float]
    consumed: dict[str, float]
    allocated: dict[str, float]
    total: float

    def ideal(self) -> dict[str, float]:
        ids = list(self.demand)
        return dict(zip(ids, max_min_fair(self.quota, [self.demand[i] for i in ids]), strict=True))

    def converged(self) -> bool:
        ideal = self.ideal()
        return all(abs(self.consumed[i] - ideal[i]) <= TOLERANCE * self.quota for i in self.demand)


def metrics(scenario: Scenario, windows: Sequence[Window]) -> dict[str, Any]:
    """DESIGN.md section 7's metrics of one run; see the module's docstring."""
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
    p, b = project["after_quota_notice"], baseline["after_quota_notice"]
    return {
        "max_overshoot_pct": _better(p["max_overshoot_pct"], b["max_overshoot_pct"], "overshoot"),
        "utilization_pct": _better(
            _shortfall(p["utilization_capped_pct"]),
            _shortfall(b["utilization_capped_pct"]),
            "shortfall",
        ),
        "steady_error_pct": _better(
            project["steady_error_pct"], baseline["steady_error_pct"], "steady_error"
        ),
        "convergence_intervals": _better(
            _or_inf(project["convergence_intervals"]),
            _or_inf(baseline["convergence_intervals"]),
            "convergence",
        ),
        "jain_fairness": _better(
            _shortfall(project["jain_fairness"], 1.0),
            _shortfall(baseline["jain_fairness"], 1.0),
            "jain",
        ),
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
        **_rounded(metrics(scenario, windows)),
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
    }


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
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
