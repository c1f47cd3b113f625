"""Leases: how long an answer holds, and when reporters holding one must report at once.

A settling reporter's answer holds one report interval, a steady one's
`Settings.report_lease_seconds`; a reporter is gone `GRACE_INTERVALS` intervals after its
lease, as its worker falls back. A group's **wake** moves when a new summary moved its
levels by `SIGNIFICANT_CHANGE` since the last wake, or a leave freed `LEAVE_WAKE` of its
allocations in force; workers watch it and report at once. Why, and what it costs: the
"Leases and pushes" section of docs/design.md.
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
