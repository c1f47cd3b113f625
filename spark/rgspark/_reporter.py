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

A server that is up but has more reports than it stores sheds some (503) and says what it
counts of the worker (``X-Lease-Kept-Ms``, `rgspark._admin.ReportShed`): kept alive for a
while yet (a report waiting in line keeps it so), the worker holds its last allocation
that long too, and no fallback, and reports again an interval before that runs out; no
longer counted (its share went to the others), it holds nothing of its own until a report
of it is stored (`State.UNCOUNTED`). So what shed workers enforce is what the server counts.

An answer the worker cannot use counts as no answer: one that is not JSON or not the API's
(a field missing, a rate that is NaN, negative or below what a bucket holds:
`rgspark._admin.report_answer`), or one that raises as it is applied. It is logged once per
streak of failures, with the reporter's id, and the fail-static rule holds; neither the reporter
thread nor the watcher below ever stops on one.

Changes pushed. Beside the reporting thread, a second one holds the server's long poll on
changes (``GET /quota/v1/changes``) to the admin state and to its groups' shares: when a
group, an attachment or the default group changes, the server answers it at once and the
reporter reports then, not at its next turn, so a quota cut is in force within a fraction
of a second whatever the report interval or lease. When others join, leave or change
their demand enough to move this worker's share, the group's wake moves and the worker
reports as soon as `MIN_SPACING` of an interval has passed since its last report. A server
without that endpoint is simply not watched.

When the next report is due is the `Schedule`'s alone: a `State` (no answer yet, answered,
confirming a fall, retrying, fallen back), what happened since the last report was sent
(a `Nudge`) and their times; `Schedule.due_in` is the question the reporter thread asks.

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

from ._admin import MIN_ALLOCATION, AdminClient, ReportAnswer, ReportShed, report_answer
from ._exceptions import AdminServerError, NamespaceNotFoundError, UnexpectedResponseError
from ._quota import DEFAULT_INTERVAL_S, Fallbacks, NamespaceQuota
from ._schedule import FAILING, MAX_BACKOFF_S, Nudge, Schedule, State
from .wire import GRACE_INTERVALS, UNLIMITED_ALLOCATION

__all__ = ["Nudge", "Reporter", "Schedule", "State"]

logger = logging.getLogger("rgspark")

UNCOUNTED_RATE = MIN_ALLOCATION  # what a worker the server does not count holds: the least
WATCH_S = 30.0  # how long one long poll on changes waits for one
MAX_WATCHED_GROUPS = 100  # the most groups one long poll watches (the server's limit)


_HOLDING_LESS = (State.FALLEN_BACK, State.UNCOUNTED)  # than the last answer's allocations


class _ApplyError(UnexpectedResponseError):
    """An answer raised as it was applied: a bug, logged with its traceback."""


class Reporter:
    """Reports a process's usage for its namespaces and applies the allocations it gets back.

    `run_once` does one round trip and raises when it fails: `request` (the body), the
    round trip, then `take_answer` (check the answer, apply it, schedule the next report).
    `report` does one with the failure handling of the module's fail-static rule (`failed`);
    `due_in` says when the next is due (the `schedule`'s question). `start` runs them on a
    daemon thread at the server's cadence; `close` stops the thread and releases the shares
    at once. `wall_clock` (seconds since the epoch) and `sleep` (None: a wait that a task
    start cuts short, or `close`) let tests and the quota simulator drive it on fake time.
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
        self.schedule = Schedule(wall_clock(), self._moved)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # The watcher watches the groups of the last answer: set once it came, and clear
        # from an admin change until the next (whose groups may be others).
        self._groups_known = threading.Event()
        self._groups: frozenset[str] = frozenset()
        self._watch_admin: AdminClient | None = None
        for quota in self.namespaces.values():
            quota.on_start = self._on_start
        # The last answer, checked; None before any.
        self._answer: ReportAnswer | None = None
        #: Seconds until the next report, as the last answer asked (less when it asks early).
        self.interval_s = DEFAULT_INTERVAL_S
        #: How long the last answer holds (its lease; the report interval before any).
        self.lease_s = DEFAULT_INTERVAL_S
        #: When the server last answered (the report's sending time); None before it has.
        self.reached_at: float | None = None
        #: Until when a server that shed a report since said it counts this worker alive.
        self.kept_until: float | None = None
        #: Seconds the server's request quota asked this reporter to hold back, in all.
        self.throttled_s = 0.0

    @property
    def period_s(self) -> float:
        """The server's report interval (its answers say it)."""
        return self.schedule.period_s

    @property
    def failures(self) -> int:
        """Reports failed in a row."""
        return self.schedule.failures

    @property
    def on_fallback(self) -> bool:
        """Whether the buckets hold the fallback allocations (fail-static, past the bound)."""
        return self.schedule.state is State.FALLEN_BACK

    def run_once(self) -> float:
        """Report and apply the answer; returns the seconds until the next report."""
        now = self._wall_clock()
        return self.take_answer(self.admin.report(self.reporter_id, self.request(now)), now)

    def request(self, now: float) -> dict[str, Any]:
        """The body of a report sent at ``now`` (it ends the interval it reports on).

        A caller that makes the round trip itself (the join-storm benchmark drives
        thousands of reporters on one event loop) calls `request`, then `take_answer`, or
        `failed` when the round trip fails, as `report` does."""
        confirming = self._confirming()
        body: dict[str, Any] = {
            "sentAtMs": round(now * 1000),
            "intervalMs": max(1, round((now - self.schedule.sent_at) * 1000)),
            "namespaces": {
                key: quota.usage(self.period_s, enforced=confirming)
                for key, quota in self.namespaces.items()
            },
        }
        self.schedule.sent(now)
        return body

    def take_answer(self, answer: Mapping[str, Any], now: float) -> float:
        """Apply the answer to the report sent at ``now``; returns the seconds until the
        next report. Raises `UnexpectedResponseError` for an answer the worker cannot use,
        having changed nothing (`rgspark._admin.report_answer`), or one that raised as it
        was applied."""
        checked = report_answer(answer, self.namespaces)
        confirming = self._confirming()  # whether the report said what the buckets enforce
        fell = self._apply(checked)
        self._learn(checked, now)
        was = self.schedule.state
        delay = self.schedule.answered(
            now, checked.interval_s, fell=fell and confirming, throttle_s=self._honour_throttle()
        )
        if was in FAILING:
            logger.info("rgspark: reporter %s: the admin server answers again", self.reporter_id)
        return delay

    def _apply(self, answer: ReportAnswer) -> bool:
        """Hold each namespace to its allocations, or observe them (its group's mode);
        returns whether some rate fell."""
        fell = False
        try:
            for key, quota in self.namespaces.items():
                part = answer.namespaces[key]
                fell = quota.apply(part.allocations) or fell
                quota.observe(part.observing)
        except Exception as exc:
            raise _ApplyError(f"The answer could not be applied: {exc!r}") from exc
        return fell

    def _learn(self, answer: ReportAnswer, now: float) -> None:
        """What the answer says beyond the allocations: the server's times, the groups."""
        if answer.period_s is not None:
            period = answer.period_s
        elif self._answer is None:  # an older server: the longest wait its answers asked for
            period = answer.interval_s
        else:
            period = max(self.period_s, answer.interval_s)
        self.schedule.period_s = period
        self.lease_s = period if answer.lease_s is None else answer.lease_s
        self.interval_s = answer.interval_s
        self.reached_at, self.kept_until = now, None
        self._answer = answer
        parts = answer.namespaces.values()
        self._groups = frozenset(part.group for part in parts if part.group is not None)
        self._groups_known.set()

    def _confirming(self) -> bool:
        """Whether the server asks reports to say what the buckets enforce (an older one
        refuses a report that does)."""
        return self._answer is not None and self._answer.confirm_falls

    def _fallbacks(self, key: str) -> Fallbacks:
        part = None if self._answer is None else self._answer.namespaces.get(key)
        return None if part is None else part.fallbacks

    def report(self) -> bool:
        """One report, as the reporter thread sends it; returns whether the server answered.

        On failure (no answer, an error, or an answer the worker cannot use), the buckets
        keep their allocation until the fail-static bound has passed, then hold the
        fallback (see the module's docstring), and the next report is due after a backoff,
        or at the bound if that comes first.
        """
        try:
            self.run_once()
        except AdminServerError as exc:
            self.failed(exc)
            return False
        return True

    def fallback_at(self) -> float | None:
        """When the buckets move to the fallback if the server stays unreachable; None
        before any answer (``on_no_policy`` applies then), and while the server does not
        count this worker (it holds nothing of its own then, and no fallback)."""
        if self.reached_at is None or self.schedule.state is State.UNCOUNTED:
            return None
        held = self.reached_at + self.lease_s
        if self.kept_until is not None:
            held = max(held, self.kept_until)
        return held + GRACE_INTERVALS * self.period_s

    def failed(self, exc: Exception) -> None:
        """The report failed with ``exc``: back off, and fall back once past the bound;
        or, when the server shed it, hold what the server said it counts (`ReportShed`).
        Logged once per streak of failures (the rest at debug level)."""
        now = self._wall_clock()
        counted = None
        if isinstance(exc, ReportShed) and self.reached_at is not None:
            counted = exc.kept_s > 0
            if counted:  # kept from while it waited in line, after it was sent
                self.kept_until = max(self.kept_until or 0.0, self.schedule.sent_at + exc.kept_s)
        before = self.schedule.state
        after = self.schedule.failed(now, self.fallback_at(), counted=counted)
        if after is not before and (after is not State.RETRYING or before in _HOLDING_LESS):
            self._hold(after)
        self._honour_throttle()
        first = self.schedule.failures == 1
        bug = isinstance(exc, _ApplyError) or not isinstance(exc, AdminServerError)
        (logger.warning if first else logger.debug)(
            "rgspark: reporter %s: report failed (%s); retrying in %.1f s",
            self.reporter_id,
            exc,
            self.schedule.due - now,
            exc_info=exc if bug and first else None,
        )

    def _hold(self, state: State) -> None:
        """What the buckets hold on entering a failing state: the fallback, nothing of their
        own (not counted), or, back from either (the server counts it again), the last
        allocations."""
        if state is State.FALLEN_BACK:
            self._fall_back()
        elif state is State.UNCOUNTED:
            self._hold_nothing()
        elif self._answer is not None:  # RETRYING, from FALLEN_BACK or UNCOUNTED
            for key, quota in self.namespaces.items():
                quota.apply(self._answer.namespaces[key].allocations)

    def _hold_nothing(self) -> None:
        assert self._answer is not None  # counted only once answered
        for key, quota in self.namespaces.items():
            allocations = self._answer.namespaces[key].allocations
            quota.apply(
                {
                    dimension: rate if rate == UNLIMITED_ALLOCATION else UNCOUNTED_RATE
                    for dimension, rate in allocations.items()
                }
            )
        logger.warning(
            "rgspark: reporter %s: the admin server no longer counts this worker (its reports "
            "waited too long in line); holding nothing until one is stored",
            self.reporter_id,
        )

    def _fall_back(self) -> None:
        for key, quota in self.namespaces.items():
            fallbacks = self._fallbacks(key)
            if fallbacks is not None:
                try:
                    quota.apply(fallbacks)
                except Exception:  # a bug: the last allocation stays, as without a fallback
                    logger.exception(
                        "rgspark: reporter %s: no fallback for %s", self.reporter_id, key
                    )
        logger.warning(
            "rgspark: reporter %s: no answer from the admin server for its lease and %d report "
            "intervals; holding the fallback allocations (its fair share of each group) until "
            "it answers",
            self.reporter_id,
            GRACE_INTERVALS,
        )

    def _honour_throttle(self) -> float:
        """The server's throttle time (KIP-124): no call before it has passed."""
        throttle = self.admin.throttle_s
        if throttle:
            self.throttled_s += throttle
            self.schedule.throttled(self._wall_clock() + throttle)
            logger.info("rgspark: the admin server throttles this worker for %.2f s", throttle)
        return throttle

    def due_in(self, now: float) -> float:
        """Seconds from `now` until the next report should go out (`Schedule.due_in`)."""
        return self.schedule.due_in(now)

    def _on_start(self) -> None:
        self.schedule.nudge(Nudge.SOON)
        self._wake.set()

    def changed(self, *, admin: bool) -> None:
        """The server says something this process's shares come from changed: the admin
        state (``admin``: report at once) or a group's shares (report soon: `due_in`)."""
        if admin:
            self.schedule.nudge(Nudge.NOW)
            self._groups_known.clear()  # watch the groups that the next answer gives
        else:
            self.schedule.nudge(Nudge.SOON)
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
        """Hold the long poll on changes; on one, have the reporter report (`changed`).

        Only a server without the endpoint ends it: a failed poll, or an answer it cannot
        use, is tried again after a backoff, as reports are (the first of a streak logged:
        the reports notice a server that fails, not a watch that does)."""
        after: int | None = None
        wakes: dict[str, int | None] = {}
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    after, wakes = self._poll(admin, after, wakes)
                except NamespaceNotFoundError:
                    logger.info("rgspark: the admin server does not push changes")
                    return
                except Exception as exc:
                    if self._stop.is_set():  # `close` ended the poll
                        return
                    failures += 1
                    backoff = min(self.period_s * 2**failures, MAX_BACKOFF_S)
                    (logger.info if failures == 1 else logger.debug)(
                        "rgspark: reporter %s: watching for changes failed (%s); again in %.1f s",
                        self.reporter_id,
                        exc,
                        backoff,
                        exc_info=exc
                        if failures == 1 and not isinstance(exc, AdminServerError)
                        else None,
                    )
                    self._pause(backoff)
                    continue
                failures = 0
                if admin.throttle_s:
                    self._pause(admin.throttle_s)
        finally:
            admin.close()

    def _poll(
        self, admin: AdminClient, after: int | None, wakes: dict[str, int | None]
    ) -> tuple[int, dict[str, int | None]]:
        """One long poll, from the generation and wakes seen (`after`, `wakes`): tells the
        reporter of a change, and returns what it saw."""
        self._groups_known.wait(WATCH_S)  # the groups to watch are those of the last answer
        groups = sorted(self._groups)[:MAX_WATCHED_GROUPS]
        wakes = {group: wakes.get(group) for group in groups}
        generation, seen = admin.changes(after, wakes, WATCH_S)
        if after is not None and generation > after:
            self.changed(admin=True)
        elif any(wakes.get(group) not in (None, wake) for group, wake in seen.items()):
            self.changed(admin=False)
        return generation, {**wakes, **seen}

    def close(self) -> None:
        """Stop reporting and release this process's shares, so others get them at once."""
        self._stop.set()
        self._wake.set()
        self._groups_known.set()  # a watcher waiting for its groups stops now
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
            quota.demand_moved(interval_s=self.period_s, fair=self._fallbacks(key))
            for key, quota in self.namespaces.items()
        )

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._wait()
                if self._stop.is_set():
                    return
                self.report()
            except Exception as exc:  # a bug: fail-static, as when the server fails
                self.failed(exc)
                self._pause(self.schedule.due - self._wall_clock())

    def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or until `close`."""
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            self._stop.wait(seconds)
