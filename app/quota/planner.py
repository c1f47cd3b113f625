"""A group's ledger of allocations in force, and everything that moves it, with no I/O: the
store reads a group's row, calls `plan` (a report's grants), `released`, `count`, `take` (rows
that leave) or `summarize`, and stores what they return (`app.quota.store`,
`app.quota.repository`). Only this module moves the sums in force; `tests/app/planner_cases`
checks it. Why: docs/design.md ("The invariant").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.quota.allocator import granted, summarize_columns
from app.quota.levels import DimensionSummary, GroupSummary
from app.quota.tuning import LEAVE_WAKE, PACED_RISE
from app.quota.types import ALLOCATIONS, DEMANDS, USAGES, Figures, GroupQuotas, Rates
from rgspark.wire import ALLOCATION_CHANGE, DIMENSIONS, UNKNOWN_DEMAND, moved

__all__ = [
    "GroupPlan",
    "Member",
    "allocations_of",
    "count",
    "plan",
    "released",
    "summarize",
    "take",
]

Sums = list[float]
"""A group's allocations in force, summed per dimension (in `DIMENSIONS` order)."""


@dataclass(frozen=True, slots=True)
class Member:
    """One namespace of the reporting reporter, as the plan of its group sees it."""

    namespace: str
    """``tenant/namespace``: the quota is shared among namespaces first."""
    stored: Figures | None
    """Its row's figures as the group's sums count them; None if not counted in the group
    (new, or in another group until now)."""
    figures: Figures
    """As it reports now; its allocations are those in force (a fall it says it applied is
    in force at the new rate)."""
    enforced: Rates
    """What its worker says it enforces per dimension; None where it does not say."""

    @property
    def had(self) -> Rates:
        """The allocations it has in force in the group: none if it was not in it."""
        if self.stored is None:
            return (None,) * len(DIMENSIONS)
        return tuple(self.figures[at] for at in ALLOCATIONS)


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """A report's grants in one group, and the group's ledger after them."""

    rates: tuple[Rates, ...]
    """Per member, per dimension: the rate granted (None where the group does not limit)."""
    fairs: tuple[Rates, ...]
    """Per member, per dimension: its fair share, the fallback its worker enforces."""
    counted: dict[int, Rates]
    """By member position: the rates counted in force where a fall waits for its worker
    to say it applied it (the old rate where one fell, the granted one elsewhere)."""
    in_force: Sums
    """The group's sums in force after the grants."""
    shortfalls: list[float]
    """Per dimension, the shortfall of the summary's levels once settled by the grants."""
    early: bool
    """Whether the reporter should report again soon (it waits for headroom, for demands
    still unknown, or to confirm a fall)."""
    had: tuple[Rates, ...]
    """Per member, what it had in force in the group before (`Member.had`)."""

    @property
    def unchanged(self) -> bool:
        """Whether the grants are what the members had in force, with no fall waiting."""
        return not self.counted and self.rates == self.had


def plan(
    summary: GroupSummary, in_force: Sequence[float], members: Sequence[Member], *, paced: bool
) -> GroupPlan:
    """Grant each member in turn from the summary's levels and the sums in force.

    An allocation that moved by less than `ALLOCATION_CHANGE` is kept as it is; a ``paced``
    reporter (`app.quota.pacing`) takes no rise of less than `PACED_RISE` of its rate (its
    worker would come back a pace later for less than a hundredth of its rate)."""
    rates: list[list[float | None]] = [[None] * len(DIMENSIONS) for _ in members]
    fairs: list[list[float | None]] = [[None] * len(DIMENSIONS) for _ in members]
    sums = [a - r for a, r in zip(in_force, released(members), strict=True)]
    shortfalls = [0.0] * len(DIMENSIONS)
    falls: dict[int, dict[int, float]] = {}
    early = False
    had = tuple(member.had for member in members)
    for index, dimension in enumerate(summary.dimensions):
        if dimension is None:
            continue
        sums[index], shortfalls[index], soon = _grant_dimension(
            dimension, index, sums[index], members, had, rates, fairs, falls, paced
        )
        early = early or soon
    counted = {
        position: tuple(fell.get(i, rate) for i, rate in enumerate(rates[position]))
        for position, fell in falls.items()
    }
    return GroupPlan(
        tuple(map(tuple, rates)),
        tuple(map(tuple, fairs)),
        counted,
        sums,
        shortfalls,
        early,
        had,
    )


def _grant_dimension(
    dimension: DimensionSummary,
    index: int,
    total: float,
    members: Sequence[Member],
    had: Sequence[Rates],
    rates: list[list[float | None]],
    fairs: list[list[float | None]],
    falls: dict[int, dict[int, float]],
    paced: bool,
) -> tuple[float, float, bool]:
    """One dimension of `plan`: each member's grant (into ``rates`` and ``fairs``, with the
    falls counted at their old rate into ``falls``); returns the dimension's sum in force,
    the levels' shortfall once settled, and whether to report again soon."""
    levels = dimension.levels
    shortfall = levels.shortfall  # each grant as from the levels settled by those before
    early = False
    for position, member in enumerate(members):
        was = had[position][index]
        demand = member.figures[DEMANDS[index]]
        rate, fairs[position][index], soon = granted(
            levels, shortfall, member.namespace, demand, was, total
        )
        if was is not None and _kept(was, rate, paced):
            rate = was
        counted = rate
        if was is not None and rate < was and member.enforced[index] is not None:
            # Its worker runs at ``was`` until the answer reaches it: the room is the
            # others' once it says so, at its next report, which it sends soon.
            counted, soon = was, True
            falls.setdefault(position, {})[index] = was
        early = early or soon
        total += counted - (was or 0.0)
        shortfall = levels.settled_shortfall(shortfall, member.namespace, demand, was, rate)
        rates[position][index] = rate
    return total, shortfall, early


def _kept(was: float, rate: float, paced: bool) -> bool:
    """Whether an allocation stays as it was rather than move to ``rate``: it moved by less
    than `ALLOCATION_CHANGE`, or by a rise of less than `PACED_RISE` for a paced reporter."""
    return not moved(was, rate, ALLOCATION_CHANGE) or (
        paced and was < rate < was * (1 + PACED_RISE)
    )


def released(members: Iterable[Member]) -> Sums:
    """Per dimension, what the members release of the allocations their group's sums count
    for them: falls granted before that their workers say they applied since."""
    room = [0.0] * len(DIMENSIONS)
    for member in members:
        stored = member.stored
        if stored is None or stored is member.figures:
            continue
        for index, at in enumerate(ALLOCATIONS):
            room[index] += (stored[at] or 0.0) - (member.figures[at] or 0.0)
    return room


def count(rows: Iterable[tuple[str | None, Sequence[float | None]]]) -> dict[str, Sums]:
    """Per group, the sums of the allocations of ``rows``: (group, allocations per
    dimension) each, None where there is none; rows in no group count nowhere."""
    sums: dict[str, Sums] = {}
    for group, allocations in rows:
        if group is None:
            continue
        summed = sums.get(group)
        if summed is None:
            summed = sums[group] = [0.0] * len(DIMENSIONS)
        for index, allocation in enumerate(allocations):
            summed[index] += allocation or 0.0
    return sums


def allocations_of(figures: Figures) -> tuple[float | None, ...]:
    """A row's allocations per dimension."""
    return tuple(figures[at] for at in ALLOCATIONS)


def take(in_force: Sequence[float], leaving: Sequence[float]) -> tuple[Sums, bool]:
    """The sums once rows whose allocations sum to ``leaving`` left the group (never below
    0), and whether that frees enough of them to wake the group's reporters
    (`app.quota.tuning.LEAVE_WAKE`)."""
    woken = any(
        was > 0 and left >= LEAVE_WAKE * was for was, left in zip(in_force, leaving, strict=True)
    )
    after = [max(was - left, 0.0) for was, left in zip(in_force, leaving, strict=True)]
    return after, woken


def summarize(
    marker: int,
    quotas: GroupQuotas,
    peers: Sequence[tuple[str, str, Figures]],
    members: Sequence[Member],
) -> GroupSummary:
    """A group's summary from its live reporters' rows: ``peers`` (reporter,
    ``tenant/namespace``, figures) each, and the reporting reporter's ``members`` as it
    reports now, with the allocations they have in force in the group."""
    figures = [peer[2] for peer in peers] + [member.figures for member in members]
    names = [peer[1] for peer in peers] + [member.namespace for member in members]
    columns = list(zip(*figures, strict=True))
    had = list(zip(*(member.had for member in members), strict=True))
    dimensions: list[DimensionSummary | None] = []
    for index, quota in enumerate(quotas):
        if quota is None:
            dimensions.append(None)
            continue
        demands = columns[DEMANDS[index]]
        allocations = [*columns[ALLOCATIONS[index]][: len(peers)], *had[index]]
        dimensions.append(
            DimensionSummary(
                summarize_columns(quota, names, demands, allocations),
                sum(columns[USAGES[index]], 0.0),
                sum([d for d in demands if d < UNKNOWN_DEMAND], 0.0),
            )
        )
    reporters = len({peer[0] for peer in peers}) + 1
    units = len(peers) + len(members)
    return GroupSummary(marker, units, 1, reporters, tuple(dimensions))  # its first grant
