"""The allocator: a group's configured rate and its reporters' fresh reports in, rates out.

Pure: no I/O, no clock. The store calls it once per group and dimension, with the group's
fresh reports, whenever one reporter reports, and answers that reporter with its own entry;
the others pick theirs up at their own next reports, at their own times. So some reporters
always run at new allocations while others still run at old ones, and what must stay within
the quota is the sum *in force*, not just the sum of one answer.

For a quota ``Q`` and ``n`` reporters, reporter ``i`` with demand ``d_i`` and allocation in
force ``a_i`` (0 before its first):

1. **Fair shares, namespaces first.** Demand counts as at least a floor ``φ = Q / (100 n)``:
   an idle reporter (demand 0: it consumed nothing for a whole interval) keeps a trickle (a
   TokenBucket needs a positive rate) through which it can show demand when it wakes.
   ``Q`` is split max-min fairly (Doorman's FAIR_SHARE) among the namespaces by each
   namespace's total demand, and each namespace's part among its reporters by theirs:
   ``f_i = min(d_i, λ)`` with ``λ`` the level at which the shares add up to what is split,
   or ``f_i = d_i`` when the demands add up to no more. So a namespace's share never
   depends on how many processes it runs (or how many reporter ids it makes up). Demand,
   not usage: a throttled reporter's usage is its allocation, so a split by usage
   (Pulsar's) never lets it grow. The fair shares add up to ``Q`` at most, so they are
   also what reporters fall back to when the server is gone (the answer's
   ``fallbackAllocations``): a busy reporter keeps about what it had, an idle one its
   floor, and a newcomer, whose demand is not known yet, about an equal share rather
   than the probe below.
2. **Targets.** Spare ``S = Q - Σ f`` (left only when every demand is met) buys each reporter
   growth room in proportion to its share, ``t_i = f_i (1 + min(G, S / Σ f))``, ``G = 1/4``;
   the rest of ``S`` stays unallocated, for newcomers and growers to take at once. An idle
   reporter's target is its floor plus that room, never the quota (Pulsar hands idle
   reporters the whole quota, and they overshoot when they wake).
3. **Grants.** Free headroom is ``F = Q - Σ_j a_j``. A reporter above its target drops to it
   at once. Those below rise into ``F⁺ = max(F, 0)``, shared in proportion to their
   shortfalls ``s_i = t_i - a_i``: ``g_i = a_i + s_i · min(1, F⁺ / Σ s)``. So increases only
   use room that others' allocations in force leave free, and a reporter rises as the
   others shrink. A newcomer gets at least a probe even when ``F`` is used up, so it starts
   at once: ``min(t_i, 2% · max(f_i, Q / n), 2% · Q - over)``, ``over`` being what the
   allocations in force already exceed the quota by (its fair share counts, so that one
   process of a new namespace does not start at a fiftieth of what another namespace's
   fifty do); once that room is gone, only the floor ``φ``. So the
   sum in force exceeds the quota by at most 2% for newcomers' probes, plus floors when
   many arrive at once, before the others have reported: ``k`` newcomers joining ``n``
   reporters within an interval add at most ``1% · Q · ln((n + k) / n)`` more (4.3% in all
   when a group grows tenfold at once). Nothing else ever adds to it, whether the grants
   are applied together or one by one as reporters report, except a quota cut, which
   reaches each reporter only at its next report.
4. **Report again soon.** A reporter should report again after an eighth of the interval
   (`EARLY_REPORT`) rather than a whole one (`granted` says which) when it is new, when its
   grant is short of its fair share (it waits for others to shrink: it then rises soon
   after they do, instead of up to an interval later, which keeps convergence within 3
   intervals), and when it wants more than its share while some reporter's demand is still
   unknown (that share is about to grow, as soon as the unknown demands turn out smaller
   than a share). These are transients, so the extra reports are few: 5-15% more than one
   per interval in the simulator's scenarios.

**Held figures.** The allocator is given each reporter's demand as last *recorded*, and a
new figure is recorded only when it moved by `SIGNIFICANT_CHANGE` (5%) or more (`moved`: both
in `rgspark.wire`, as the reporters' side of the rule uses them too).
Measured demand always jitters a little; were every jitter fed in, every plan would move
every allocation a little, every report would rewrite its rows, and no answer could be
reused. Held, a steady group's inputs stay the same from one report to the next, and so do
its grants: `granted` is a function of its inputs alone. A 5% error in a demand moves a fair
share by less than 5%, well inside what the shares must meet.

A demand of `UNKNOWN_DEMAND` (1e18, the most a report carries) or more, or `math.inf`, is unknown:
what a reporter says before it has measured anything. It counts as unbounded, so that the
reporter is owed an equal share until its next report, soon after, says what it really
wants.

**Burst.** A reporter's bucket should hold ``BURST_S`` = 0.1 s of its rate (`rgspark.wire`),
not the default second, and start empty; rgspark's do. The burst is what a reporter consumes
on top of its rate after running below it, so it lands on top of every other reporter's
share: a second's worth, with every reporter waking at once, doubles the group's rate for a
second. A tenth of a second bounds that at 10% even then, and at a few percent for the one
or two reporters that change at a time. Less would hold a steady worker back between the
slices it charges (the Spark helpers charge about 100 ms of rate at a time), which costs
latency and makes its demand look higher than it is. Starting empty keeps a fleet of
processes that start together from each bursting at once.
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
