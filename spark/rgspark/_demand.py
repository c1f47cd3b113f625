"""Per dimension, what a worker process used between reports and the rate it wanted."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Callable, NamedTuple

__all__ = ["DemandEstimator", "DemandSample"]

_NS_PER_SECOND = 1_000_000_000

# A caller held back 99% of the time is counted as wanting 100 times what it got, no more:
# past that the unheld time is too short to time, and the allocator only needs to know that
# a reporter wants more than it has, since it never grants more than a fair share anyway.
MAX_FACTOR = 100.0
# The window reaches back far enough to hold this many charges, where history allows: with
# fewer, one charge more or less in the window would swing the estimate.
MIN_CHARGES = 8
# Snapshots are taken at charges at least half a `recent_s` apart: this many reach at least
# four `recent_s` back, half a report interval when `recent_s` is an eighth of one.
_SNAPSHOTS = 9
# A caller released early lets the held time end only if no other caller is held past its
# own foreseen end by more than this (its sleeps run late by a little each).
_RELEASE_SLACK_NS = 10_000_000


class DemandSample(NamedTuple):
    """One report's figures for one dimension."""

    used: float
    """Units consumed since the previous report."""
    elapsed_s: float
    """Seconds since the previous report (or since the estimator was made)."""
    demand: float
    """Units per second it would have used unthrottled; `math.inf` while unknown."""


class DemandEstimator:
    """Counts what callers consume and how long they are held back; estimates their demand.

    Callers record every charge: `record_charged` after `Limiter.charge` (held back for the
    wait to come) or `record_acquired` after `Limiter.acquire` (held back for the sleep just
    done). `report` then gives the units used since the previous report and the demand: the
    rate at which callers consume while nothing holds them back,

        demand = C / max(W - H, W / MAX_FACTOR)

    over a recent window of ``W`` seconds in which they consumed ``C`` units and were held
    back ``H`` seconds (while at least one caller was held, so that concurrent waits count
    once). Unthrottled, ``H = 0`` and the demand is the usage; throttled at an allocation
    ``a`` below a demand ``D``, callers consume ``a`` and are held a fraction ``1 - a / D`` of
    the time, so the estimate is ``D`` again, where usage alone would say ``a`` forever.

    The window is recent, not the whole time since the previous report, so that the
    allocator sees a change in demand within about `recent_s` of it rather than averaged
    with what came before (an eighth of the report interval is a good choice: the default
    suits the server's default interval of a second). It starts just after a charge, at
    least `recent_s` back (and far enough for `MIN_CHARGES` charges, up to ``4 *
    recent_s``), and ends at the latest charge or wait when the time since is shorter than
    a charge's usual work: that work is under way and not charged yet, and counting its time
    without its units would understate the demand. A longer quiet time is idleness and
    counts; a whole `recent_s` of it is a demand of 0, and the window of the work that
    follows starts at its first charge (so a worker that wakes shows its demand at once, not
    averaged with its idle time). Until the first charge, or `recent_s` without one, the
    demand is unknown and reported as `math.inf`, which the allocator reads as "owed a fair
    share until the next report says more". `demand` gives the estimate
    without ending the report interval, for a reporter that reports early when demand moved
    by `rgspark.wire.DEMAND_CHANGE` (as PIP-82's brokers do on a significant change).

    `clock` returns monotonic nanoseconds, `time.monotonic_ns` by default. Every method may be
    called from any thread: one lock guards the few counters, and recording is a clock read
    and a handful of additions under it.
    """

    __slots__ = (
        "_charges",
        "_clock",
        "_closed_ns",
        "_closed_until",
        "_created",
        "_last_charge",
        "_lock",
        "_mark",
        "_next_snapshot",
        "_recent_ns",
        "_reported_at",
        "_reported_used",
        "_seg_end",
        "_seg_start",
        "_snapshots",
        "_used",
    )

    def __init__(self, *, recent_s: float = 0.125, clock: Callable[[], int] | None = None) -> None:
        if not 0 < recent_s < math.inf:
            raise ValueError(f"recent_s must be a positive number of seconds, not {recent_s!r}.")
        self._clock = time.monotonic_ns if clock is None else clock
        self._recent_ns = max(2, round(recent_s * _NS_PER_SECOND))
        self._lock = threading.Lock()
        now = self._clock()
        self._created = self._reported_at = self._mark = self._last_charge = now
        self._used = self._reported_used = 0.0
        self._charges = 0
        # Held time is the union of the intervals callers were held: the length of every
        # closed stretch, plus the open stretch [_seg_start, _seg_end], which may reach into
        # the future when a caller has been told to wait.
        self._closed_ns = 0
        self._closed_until = self._seg_start = self._seg_end = now
        # (time, units used, held ns, charges) at least every half `recent_s`, newest last.
        self._snapshots: deque[tuple[int, float, int, int]] = deque(
            [(now, 0.0, 0, 0)], maxlen=_SNAPSHOTS
        )
        self._next_snapshot = now + self._recent_ns // 2

    def record_charged(self, units: float, wait_s: float = 0.0) -> None:
        """`units` consumed now, and the caller held back for the `wait_s` seconds to come."""
        now = self._clock()
        _check(units, wait_s)
        with self._lock:
            self._resume(now)
            if wait_s:
                self._hold(now, now + round(wait_s * _NS_PER_SECOND))
            self._count(now, units)

    def record_acquired(self, units: float, slept_s: float = 0.0) -> None:
        """`units` consumed, by a caller held back for the `slept_s` seconds up to now."""
        now = self._clock()
        _check(units, slept_s)
        held_from = now - round(slept_s * _NS_PER_SECOND)
        with self._lock:
            self._resume(held_from)
            if slept_s:
                self._hold(held_from, now)
            self._count(now, units)

    def released(self, until_s: float) -> None:
        """A caller told to wait until `until_s` seconds from now (less: its limits rose
        while it waited) goes on now. Unless another caller is held longer, the held time
        ends now: counted on to the moment first foreseen, the work that follows would be
        taken for holding, and the demand read as up to `MAX_FACTOR` times the usage."""
        now = self._clock()
        with self._lock:
            until = now + round(until_s * _NS_PER_SECOND)
            if now < self._seg_end <= until + _RELEASE_SLACK_NS:
                self._seg_end = max(now, self._seg_start)

    def report(self) -> DemandSample:
        """Units used since the previous report, the seconds since, and the demand now."""
        now = self._clock()
        with self._lock:
            used = self._used - self._reported_used
            elapsed_s = (now - self._reported_at) / _NS_PER_SECOND
            self._reported_used, self._reported_at = self._used, now
            demand = self._demand(now)
        return DemandSample(used, elapsed_s, demand)

    def demand(self) -> float:
        """The demand now, without starting a new report interval.

        For a reporter deciding whether demand moved enough since its last report to report
        again before its interval is up, as PIP-82's brokers do on a significant change.
        """
        now = self._clock()
        with self._lock:
            return self._demand(now)

    # The helpers below are called with the lock held.

    def _resume(self, start: int) -> None:
        """A caller's work or wait starting at `start`: if that ends a whole window of
        idleness (no charge, nobody held), the window starts here from now on."""
        if start - max(self._last_charge, self._seg_end) >= self._recent_ns:
            # The idle time was measured as a demand of 0 while it lasted; a window reaching
            # back across it would make a worker that wakes look idle for a while yet.
            self._snapshots.clear()
            self._snapshots.append((start, self._used, self._held_at(start), self._charges))
            self._mark = start
            self._next_snapshot = start + self._recent_ns // 2

    def _count(self, now: int, units: float) -> None:
        self._used += units
        self._charges += 1
        self._last_charge = now
        # After the units, so that a window starting here holds whole charges.
        if now >= self._next_snapshot:
            self._snapshots.append((now, self._used, self._held_at(now), self._charges))
            self._mark = now
            self._next_snapshot = now + self._recent_ns // 2

    def _demand(self, now: int) -> float:
        if not self._charges and now - self._created < self._recent_ns:
            return math.inf
        start, used_before, held_before, charges_before = self._window_start(now)
        charges = self._charges - charges_before
        end = now
        busy_until = min(max(self._last_charge, self._seg_end), now)
        if charges and busy_until > start:
            unheld = busy_until - start - (self._held_at(busy_until) - held_before)
            if now - busy_until <= unheld / charges:
                end = busy_until  # work under way, not charged yet
            elif now - busy_until >= self._recent_ns:
                return 0.0  # idle for a whole window
        window = end - start
        if window <= 0:
            return 0.0
        unheld_ns = max(window - (self._held_at(end) - held_before), window / MAX_FACTOR)
        return (self._used - used_before) * _NS_PER_SECOND / unheld_ns

    def _window_start(self, now: int) -> tuple[int, float, int, int]:
        for snapshot in reversed(self._snapshots):
            if snapshot[0] <= now - self._recent_ns and snapshot[3] <= self._charges - MIN_CHARGES:
                return snapshot
        return self._snapshots[0]

    def _hold(self, start: int, end: int) -> None:
        # Time held before the latest snapshot belongs to a window already counted.
        start = max(start, self._mark)
        if start >= end:
            return
        if start > self._seg_end:
            self._closed_ns += self._seg_end - self._seg_start
            self._closed_until = self._seg_end
            self._seg_start, self._seg_end = start, end
        else:
            # Overlaps the open stretch (concurrent callers): count the overlap once, and
            # never reach back into a closed stretch, which is counted already.
            self._seg_start = max(min(self._seg_start, start), self._closed_until)
            self._seg_end = max(self._seg_end, end)

    def _held_at(self, moment: int) -> int:
        open_ns = min(max(moment - self._seg_start, 0), self._seg_end - self._seg_start)
        return self._closed_ns + open_ns


def _check(units: float, held_s: float) -> None:
    if not (units >= 0 and held_s >= 0):
        raise ValueError(f"units and seconds held must be 0 or more, not {units!r} and {held_s!r}.")
