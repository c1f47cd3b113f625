"""Pacing: how often the reporters of one namespace may report to one server process, so that
it stores every report they send. Each answer asks for no report sooner than the namespace's
**pace**, set when the lane is `SATURATED` to keep it busy `UTILIZATION` of the time whatever
the workers' number, falling by at most `MOST_FALL` at once; leases last as long.
Why: docs/design.md ("Crowds: lanes and pacing").
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

from app.quota.tuning import LEAST_PACE, MOST_FALL, SPREAD, UTILIZATION

__all__ = ["Pace", "spread"]


class Pace:
    """One namespace's pace in one process: who reported lately, and how busy its lane is.

    ``interval_s`` is the report interval; ``silent_s``, how long a live worker may go
    without reporting (the longest lease and the grace): a paced one may go that much longer.
    """

    __slots__ = ("_busy_s", "_heard", "_since", "interval_s", "pace_s", "silent_s")

    def __init__(self, interval_s: float, silent_s: float, now: float) -> None:
        self.interval_s = interval_s
        self.silent_s = silent_s
        self.pace_s = 0.0
        """Seconds from a report to its worker's next, at least (0: as the answer says)."""
        self._heard: OrderedDict[str, float] = OrderedDict()
        """Until when each worker heard from may be silent and alive, last heard last."""
        self._since = now
        self._busy_s = 0.0
        """The lane's time in transactions since ``_since``."""

    def heard(self, reporter_id: str, now: float) -> None:
        """A report of ``reporter_id`` arrived at ``now``."""
        # Its worker is alive until its lease and the pace its answer gives have run out.
        self._heard[reporter_id] = now + self.silent_s + self.pace_s * (1 + SPREAD)
        self._heard.move_to_end(reporter_id)

    def stored(
        self,
        reporters: Sequence[str],
        seconds: float,
        now: float,
        *,
        saturated: bool,
        held_back: Sequence[float] | None = None,
    ) -> None:
        """A transaction of the lane stored reports of ``reporters`` in ``seconds``, ending
        at ``now``, and answered them with the pace; ``saturated``: they waited long enough
        in line to be shed soon. ``held_back``: the seconds each of them that the pace holds
        back took to store (by default, all of them, each an equal share of ``seconds``)."""
        for reporter_id in reporters:
            self.heard(reporter_id, now)
        self.forget_gone(now)
        heard = self._heard
        self._busy_s += seconds
        if held_back is None:
            held_back = [seconds / len(reporters)] * len(reporters) if reporters else []
        if saturated and held_back:
            # What a report held back cost the lane in this transaction. A moving average
            # over transactions fared no better: 11 runs of `benchmarks.join_storm` without
            # one against 20 with it (2026-11-29), the bound, sheds and first answers alike.
            cost = sum(held_back) / len(held_back)
            self.pace_s = max(self.pace_s, len(heard) * cost / UTILIZATION)
        window = now - self._since
        if window >= max(self.pace_s, self.interval_s):
            busy = self._busy_s / window
            factor = min(1.0, max(1 / MOST_FALL, busy / UTILIZATION))
            pace = self.pace_s * factor
            self.pace_s = pace if pace >= LEAST_PACE * self.interval_s else 0.0
            self._since, self._busy_s = now, 0.0

    def forget_gone(self, now: float) -> None:
        """Forget the workers gone by ``now``, first heard first (one heard later, on a
        shorter pace, may be gone before: it is counted until those heard before it are)."""
        heard = self._heard
        while heard and next(iter(heard.values())) < now:
            heard.popitem(last=False)

    @property
    def idle(self) -> bool:
        """Whether no live worker reports the namespace any more."""
        return not self._heard


def spread(pace_s: float) -> float:
    """An answer's pace: ``pace_s``, up to `SPREAD` longer at random, so that workers paced
    together (a job's, joining at once) do not all come back together and saturate the
    lane anew."""
    return pace_s * (1 + SPREAD * random.random())
