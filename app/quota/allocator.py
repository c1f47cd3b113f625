"""The allocator: a group's configured rate and its reporters' fresh reports in, rates out.

Pure: no I/O, no clock. Max-min fair shares by demand, namespaces first (`water_level`), a
growth room out of spare quota, and grants that rise only into the headroom the allocations
in force leave free, with a probe for newcomers: the maths, the held figures, the burst and
why the sum in force stays within the quota are in docs/design.md ("The maths: from demands
to grants", "The bound"). `summarize_columns` computes a group's `Levels` from all its
reporters at once (O(n)); `granted` is then one reporter's grant from them (O(1)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from app.quota.fair import water_level
from app.quota.tuning import FLOOR, GROWTH, PROBE, WAITING
from rgspark.wire import UNKNOWN_DEMAND


@dataclass(frozen=True, slots=True, init=False)
class Levels:
    """What every grant of a group needs to know of all its reporters (steps 1-3), computed
    from all of them at once (`summarize_columns`, O(n)) so that each reporter's grant is
    then a few operations on its own figures (`granted`, O(1)).

    Fair shares are ``f_i = min(max(d_i, φ), λ)``, where ``λ`` is the water level of the
    reporter's namespace (`namespace_levels`; `group_level`, the namespaces' own level, for
    a namespace the summary did not see, which then gets at most what any namespace does).
    """

    quota: float
    reporters: int
    group_level: float
    """The namespaces' water level: a namespace's part is ``min(its demand, level)``."""
    namespace_levels: dict[str, float]
    """Each namespace's water level among its reporters (``math.inf``: all get their wants)."""
    room: float
    """``1 + min(G, S / Σ f)``: targets are shares times this."""
    shortfall: float
    """``Σ max(t_j - a_j, 0)``: what the reporters below their targets lack, together."""
    unknown: bool
    """Whether some reporter's demand is not known yet."""
    # Derived, computed once: every grant and summary of a broker's report reads them for
    # thousands of groups.
    equal: float = field(init=False, repr=False, compare=False)
    """An equal share of the quota."""
    floor: float = field(init=False, repr=False, compare=False)
    """The least any reporter is allocated: `FLOOR` of an equal share."""

    def __init__(
        self,
        quota: float,
        reporters: int,
        group_level: float,
        namespace_levels: dict[str, float],
        room: float,
        shortfall: float,
        unknown: bool,
    ) -> None:
        # What the dataclass's own would do, through the slots' own setters rather than
        # `object.__setattr__`: a broker's report makes tens of thousands.
        _set_quota(self, quota)
        _set_reporters(self, reporters)
        _set_group_level(self, group_level)
        _set_namespace_levels(self, namespace_levels)
        _set_room(self, room)
        _set_shortfall(self, shortfall)
        _set_unknown(self, unknown)
        equal = quota / max(reporters, 1)
        _set_equal(self, equal)
        _set_floor(self, FLOOR * equal)

    def share_of(self, namespace: str, demand: float) -> float:
        """A reporter's max-min fair share, namespaces first (step 1), of its namespace and
        demand."""
        level = self.namespace_levels.get(namespace, self.group_level)
        floor = self.floor
        return min(demand if demand > floor else floor, level)

    def settled_shortfall(
        self,
        shortfall: float,
        namespace: str,
        demand: float,
        allocation: float | None,
        rate: float,
    ) -> float:
        """The shortfall once a reporter of ``namespace`` and ``demand`` that had
        ``allocation`` in force has ``rate``: what it lacks of its target counts instead of
        what it lacked before, so that the next grant from these levels shares the headroom
        as a fresh summary would. From ``shortfall``: these levels' own, or one settled from
        them by the grants before."""
        target = self.share_of(namespace, demand) * self.room
        lacked = max(target - (allocation or 0.0), 0.0)
        return max(shortfall - lacked + max(target - rate, 0.0), 0.0)

    def with_shortfall(self, shortfall: float) -> Levels:
        """These levels with another shortfall."""
        return Levels(
            self.quota,
            self.reporters,
            self.group_level,
            self.namespace_levels,
            self.room,
            shortfall,
            self.unknown,
        )


(
    _set_quota,
    _set_reporters,
    _set_group_level,
    _set_namespace_levels,
    _set_room,
    _set_shortfall,
    _set_unknown,
    _set_equal,
    _set_floor,
) = (getattr(Levels, field.name).__set__ for field in fields(Levels))


def summarize_columns(
    quota: float,
    namespaces: Sequence[str],
    demands: Sequence[float],
    allocations: Sequence[float | None],
) -> Levels:
    """A group's `Levels` from its reporters' fresh reports, as columns: each reporter's
    namespace, demand and allocation in force (None before its first), in one order, for at
    least one reporter. The columns name no reporter: the store, which keeps one row per
    reporter and namespace, names none twice.

    Raises ValueError on a quota that is not positive and finite (the store handles
    unlimited groups, -1 and 0, itself), or on a negative or NaN demand or allocation.
    """
    if not 0 < quota < math.inf:
        raise ValueError(f"quota must be a positive, finite rate, not {quota!r}")
    _check_values(demands, allocations)
    return _summarized(quota, namespaces, demands, allocations)


def _summarized(
    quota: float,
    namespaces: Sequence[str],
    demands: Sequence[float],
    allocations: Sequence[float | None],
) -> Levels:
    floor = FLOOR * quota / len(demands)
    first = namespaces[0]
    if namespaces.count(first) == len(namespaces):
        # All of one namespace (a group of one namespace, the most common kind): as below,
        # without the namespaces' own split, which gives that one its total or the quota.
        wants = [demand if demand > floor else floor for demand in demands]
        total = sum(wants)
        # `water_level` of the one total: the quota if it asks for more, else unbounded.
        whole = float(quota)
        group_level = whole if total > whole else math.inf
        level = _level_of(whole, total, wants)
        fair = [want if want < level else level for want in wants]
        namespace_levels = {first: level}
    else:
        group_level, namespace_levels = _levels_of_namespaces(quota, floor, namespaces, demands)
        # Each reporter's fair share, as `Levels.share_of` gives it.
        fair = [
            min(max(demand, floor), namespace_levels[namespace])
            for namespace, demand in zip(namespaces, demands, strict=True)
        ]
    total_fair = sum(fair)
    spare = quota - total_fair
    room = 1 + min(GROWTH, max(spare, 0.0) / total_fair)
    shortfall = 0.0
    for allocation, share in zip(allocations, fair, strict=True):
        lacks = share * room - (allocation or 0.0)
        if lacks > 0.0:
            shortfall += lacks
    unknown = max(demands) >= UNKNOWN_DEMAND
    return Levels(quota, len(demands), group_level, namespace_levels, room, shortfall, unknown)


def _levels_of_namespaces(
    quota: float, floor: float, namespaces: Sequence[str], demands: Sequence[float]
) -> tuple[float, dict[str, float]]:
    """The namespaces' water level, and each one's among its reporters."""
    members: dict[str, list[float]] = {}
    for namespace, demand in zip(namespaces, demands, strict=True):
        members.setdefault(namespace, []).append(demand if demand > floor else floor)
    totals = [sum(wants) for wants in members.values()]
    group_level = _level_of(quota, sum(totals), totals)
    namespace_levels = {
        namespace: _level_of(group_level, total, wants)
        for (namespace, wants), total in zip(members.items(), totals, strict=True)
    }
    return group_level, namespace_levels


def _level_of(part: float, total: float, wants: Sequence[float]) -> float:
    """The water level at which ``wants``, which add up to ``total``, share ``part``:
    unbounded when they fit in it. Said here rather than found by `water_level`, whose
    running sum rounds by the order of the wants: 3.33 + 0.33 + 800 fit in their own sum,
    yet it found a level of 799.9999999999999, and as the store summarizes with the
    reporting worker last, the level flipped between that and unbounded from one summary
    to the next, each flip a move of the shares that woke the whole group (three reports a
    second per worker in the simulator's idle-wake scenario)."""
    return math.inf if total <= part else water_level(part, wants)


def granted(
    levels: Levels,
    shortfall: float,
    namespace: str,
    demand: float,
    allocation: float | None,
    in_force: float,
) -> tuple[float, float, bool]:
    """One reporter's grant (steps 2-4): its rate, its fair share, and whether it should
    report again soon. Of its namespace, demand and allocation in force (None before its
    first), given the group's `Levels`, their ``shortfall`` as the grants made from them
    before left it (`Levels.settled_shortfall`; the levels' own for the first), and the sum
    of the allocations in force, its own included (``in_force``).

    Whatever ``levels`` are (fresh, or from a summary a moment old), a rise never exceeds
    the headroom ``in_force`` leaves free, except by a newcomer's probe: the quota bound
    rests on ``in_force`` alone.
    """
    quota = levels.quota
    share = levels.share_of(namespace, demand)
    target = share * levels.room
    current = allocation or 0.0
    free = max(quota - in_force, 0.0)
    over = max(in_force - quota, 0.0)
    filled = 1.0 if shortfall <= free else free / shortfall
    # Down at once; up only into what the allocations in force leave free.
    rate = target if target <= current else current + min((target - current) * filled, free)
    if allocation is None:
        room_for_probes = max(PROBE * quota - over, levels.floor)
        rate = max(rate, min(target, PROBE * max(share, levels.equal), room_for_probes))
    unknown = levels.unknown or demand >= UNKNOWN_DEMAND
    early = allocation is None or rate < WAITING * share or (unknown and demand > share)
    return rate, share, early


def _check_values(demands: Sequence[float], allocations: Sequence[float | None]) -> None:
    for demand in demands:
        if not demand >= 0:
            raise ValueError(f"demand must be 0 or more, not {demand!r}")
    for allocation in allocations:
        if allocation is not None and not allocation >= 0:
            raise ValueError(f"allocation must be 0 or more, not {allocation!r}")
