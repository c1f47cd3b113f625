"""Leases: how long an answer holds, and when reporters holding one must report at once.

Every answer says how long it holds (``leaseMs``). A reporter still settling (its report
changed something, or its grant waits for headroom) holds it one report interval, as
before. A steady one (nothing it reports moved, its plan stands, nothing waits) holds it
`Settings.report_lease_seconds` (8 s by default), and reports again only then, so a steady
fleet costs the server a fraction of its reports. A reporter whose own demand moves enough
to change a grant, or whose task of an idle kind starts, reports at once whatever its lease
(rgspark's own rules); a demand that moves but changes no grant (`app.quota.figures`)
leaves a report steady.

A reporter is alive while its lease lasts, plus `GRACE_INTERVALS` report intervals for the
answer's way back and a retry: then it is gone and its share returns to the others (with a
lease of one interval, the three intervals of PIP-82's rule). Its worker falls back at the
same moment (rgspark's fail-static rule), so the sum in force keeps its bound.

The others' shares move when a group changes, and a reporter on an 8 s lease would learn
of a newcomer 8 intervals late. So a group's **wake** moves whenever its shares moved enough
to matter, and every worker watches the wakes of its groups on ``/quota/v1/changes``
(`app.quota.changes`), reporting as soon as one moves:

- a summary made anew (`app.quota.levels`) whose water levels or growth room moved by
  `SIGNIFICANT_CHANGE` (5%) or more since those of the group's last wake, in any dimension
  (compared with the last wake's, not the last summary's, so that small moves add up);
- a reporter leaving (released, expired, or its namespace moved) with `LEAVE_WAKE` (2%) or
  more of the group's allocations in force in some dimension: the room it frees is for
  the others, who learn of it now rather than when their leases end. Smaller leaves of a
  big group show in its next summary, which its other reporters' reports soon make.

A wake costs one report of every worker of the group, so an 8 s cap still holds its bars:
a change reaches every worker within the watch's poll (0.2 s) and a report, and convergence
counts in report intervals as it did before leases. The cap bounds how long a crashed
worker (one that never released) holds its share: 8 s plus the grace. It is Doorman's
refresh interval, under CockroachDB's 10 s token-bucket period.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from app.quota.allocator import Levels
from app.quota.tuning import FULL_LOOK_INTERVALS
from rgspark.wire import GRACE_INTERVALS, SIGNIFICANT_CHANGE, moved

__all__ = [
    "SILENT_INTERVALS",
    "full_look_s",
    "keep_alive_s",
    "lease_s",
    "lease_until",
    "shares_moved",
]

# A reporter with a lease of one interval is gone after this many (rgspark.wire's grace).
SILENT_INTERVALS = 1 + GRACE_INTERVALS


def lease_s(*, steady: bool, interval_s: float, max_lease_s: float) -> float:
    """How long an answer holds: the cap for a steady reporter, else one interval."""
    return max(max_lease_s, interval_s) if steady else interval_s


def lease_until(now: datetime, lease: float, interval_s: float) -> datetime:
    """When a reporter given ``lease`` now is gone unless it reports again."""
    return now + timedelta(seconds=lease + GRACE_INTERVALS * interval_s)


def keep_alive_s(interval_s: float, max_lease_s: float) -> float:
    """How long the server keeps a worker's idle connection open: as long as it counts the
    worker alive after a report (the longest lease and the grace). A steady worker's next
    report then comes on the same connection, so to the server process that remembers it
    (`app.quota.cache`); on a new one, a process of ``--workers N`` picked by the kernel
    would plan the worker's group anew, under the group's lock, at every steady report."""
    return max(max_lease_s, interval_s) + GRACE_INTERVALS * interval_s


def full_look_s(interval_s: float, max_lease_s: float) -> float:
    """How long between a reporter's full looks at its groups' markers
    (`app.quota.store`): the longest lease and `FULL_LOOK_INTERVALS` intervals, so that a
    steady reporter makes one at most every other report, not at each."""
    return max(max_lease_s, interval_s) + FULL_LOOK_INTERVALS * interval_s


def shares_moved(before: Levels, after: Levels) -> bool:
    """Whether a group's fair shares moved enough between two summaries' levels that
    reporters holding leases must learn theirs: a water level (the namespaces', or one of a
    namespace both saw) or the growth room moved by `SIGNIFICANT_CHANGE` or more."""
    if before.quota != after.quota:
        return True
    if _level_moved(before.group_level, after.group_level) or moved(before.room, after.room):
        return True
    return any(
        _level_moved(level, after.namespace_levels[namespace])
        for namespace, level in before.namespace_levels.items()
        if namespace in after.namespace_levels
    )


def _level_moved(before: float, after: float) -> bool:
    if math.isinf(before) or math.isinf(after):
        return math.isinf(before) != math.isinf(after)
    return moved(before, after, SIGNIFICANT_CHANGE)
