"""When a worker's next report is due: its reporter's state since the last round trip, what
happened since (`Nudge`), and their times (`Schedule`). `rgspark._reporter` says why each
rule holds; this is the arithmetic."""

from __future__ import annotations

import enum
import threading
from typing import Callable

from ._quota import DEFAULT_INTERVAL_S

__all__ = ["FAILING", "MAX_BACKOFF_S", "MIN_SPACING", "Nudge", "Schedule", "State"]

MAX_BACKOFF_S = 30.0
MIN_SPACING = 0.125  # of the report interval: the least time between two reports


class State(enum.Enum):
    """Where a reporter stands since its last round trip: what its next report is."""

    NEW = "new"
    """No answer yet: the first report is due at once."""
    ANSWERED = "answered"
    """Due when the answer asked, sooner once `MIN_SPACING` has passed if something moved."""
    CONFIRMING = "confirming"
    """The answer lowered a rate, which the server counts at its old value until a report
    says it is applied: due at once (never twice in a row)."""
    RETRYING = "retrying"
    """The report failed: due after a backoff, or at the fail-static bound if that comes
    first; the buckets keep the last allocation."""
    FALLEN_BACK = "fallen back"
    """Reports failed past the bound: the buckets hold the fallback; due after a backoff."""
    UNCOUNTED = "uncounted"
    """The server, up but shedding reports, said it no longer counts this worker (its
    share is the others'): the buckets hold nothing of their own, and no fallback, until a
    report is stored; due after a backoff."""


FAILING = (State.RETRYING, State.FALLEN_BACK, State.UNCOUNTED)


class Nudge(enum.IntEnum):
    """What happened since the last report went out that is worth reporting early."""

    NONE = 0
    SOON = 1
    """A task of a kind reported idle started, or the server said a group's shares moved:
    report once `MIN_SPACING` has passed since the last report."""
    NOW = 2
    """The server said the admin state changed: report at once."""


class Schedule:
    """When a reporter's next report is due: a `State`, a `Nudge` and their times.

    `due_in` is the one question; the reporter tells it what happens (`sent`, `answered`,
    `failed`, `nudge`, `throttled`). `moved` says whether some demand moved enough to
    report early (`NamespaceQuota.demand_moved`). Nudges come from other threads (tasks
    starting, the watcher): under a lock, so that a push is never taken for a lesser
    nudge, nor cleared unheard by a report that had already gone out.
    """

    __slots__ = (
        "_lock",
        "_moved",
        "due",
        "failures",
        "not_before",
        "nudged",
        "period_s",
        "sent_at",
        "state",
    )

    def __init__(self, now: float, moved: Callable[[], bool]) -> None:
        self._lock = threading.Lock()
        self._moved = moved
        self.state = State.NEW
        self.nudged = Nudge.NONE
        #: When the next report is due, as the last answer, or the backoff, says.
        self.due = now
        #: When the last report went out.
        self.sent_at = now
        #: When the server's throttle time ends: no report before.
        self.not_before = 0.0
        #: Reports failed in a row.
        self.failures = 0
        #: The server's report interval: the unit of spacing and backoff.
        self.period_s = DEFAULT_INTERVAL_S

    def due_in(self, now: float) -> float:
        """Seconds from `now` until the next report should go out; 0 when it should now.

        A report is due when the last answer asked (or, after a failure, the backoff or
        the fail-static bound says); at once on `Nudge.NOW`; sooner, once `MIN_SPACING` of
        an interval has passed since the last, on `Nudge.SOON` or when some demand moved
        (`moved`), but not while reports fail; never before the server's throttle time has
        passed. Otherwise, the time to look again: the reporter thread, and the quota
        simulator, call this whenever they wake.
        """
        due = max(self.due, self.not_before)
        if now >= due:
            return 0.0
        if self.state in FAILING:
            return due - now
        if self.nudged is Nudge.NOW and now >= self.not_before:
            return 0.0  # the limits changed: the worker learns its new share now
        spacing = self.period_s * MIN_SPACING
        earliest = max(self.sent_at + spacing, self.not_before)
        if now >= earliest and (self.nudged is Nudge.SOON or self._moved()):
            return 0.0
        look = earliest if now < earliest else now + spacing
        return min(due, look) - now

    def nudge(self, nudge: Nudge) -> None:
        with self._lock:
            self.nudged = max(self.nudged, nudge)

    def sent(self, now: float) -> None:
        """A report went out at `now`: it says all that happened before."""
        with self._lock:
            self.sent_at = now
            self.nudged = Nudge.NONE

    def answered(self, now: float, interval_s: float, *, fell: bool, throttle_s: float) -> float:
        """The report sent at `now` was answered, to report again in `interval_s`, or at once
        when a rate `fell` and the report said what the buckets enforce (to say that the
        fall applies: once in a row, so that answers never keep a worker reporting at once);
        returns the seconds until the next report."""
        at_once = fell and self.state is not State.CONFIRMING
        self.state = State.CONFIRMING if at_once else State.ANSWERED
        self.failures = 0
        delay = max(0.0 if at_once else interval_s, throttle_s)
        self.due = now + delay
        return delay

    def failed(self, now: float, bound: float | None, *, counted: bool | None = None) -> State:
        """A report failed at `now`; the fail-static bound is `bound` (None before any
        answer); `counted`: whether the server, which shed the report, said it counts the
        worker still (None: it said nothing, or was not reached). Returns the new state."""
        self.failures += 1
        if counted is not None:  # the server said: it is the judge, whatever the bound
            self.state = State.RETRYING if counted else State.UNCOUNTED
        elif self.state not in (State.FALLEN_BACK, State.UNCOUNTED):
            past = bound is not None and now >= bound
            self.state = State.FALLEN_BACK if past else State.RETRYING
        due = now + min(self.period_s * 2**self.failures, MAX_BACKOFF_S)
        if bound is not None and self.state is State.RETRYING:
            # Once more at the bound before falling back; kept by a server that shed the
            # report, an interval before it, while the server counts this worker still (the
            # next report, waiting in line in its turn, then keeps it counted).
            early = bound - self.period_s
            due = min(due, early if counted and now < early else bound)
        self.due = due
        return self.state

    def throttled(self, until: float) -> None:
        """The server asks for no call before `until`."""
        self.not_before = until
