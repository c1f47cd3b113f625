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
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ._admin import AdminClient
from ._exceptions import AdminServerError, NamespaceNotFoundError
from ._quota import DEFAULT_INTERVAL_S, Fallbacks, NamespaceQuota
from .wire import GRACE_INTERVALS

__all__ = ["Reporter"]

logger = logging.getLogger("rgspark")

MAX_BACKOFF_S = 30.0
MIN_SPACING = 0.125  # of the report interval: the least time between two reports
WATCH_S = 30.0  # how long one long poll on changes waits for one
MAX_WATCHED_GROUPS = 100  # the most groups one long poll watches (the server's limit)


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
