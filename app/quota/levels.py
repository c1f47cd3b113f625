"""A group's summary: what every grant of the group needs to know of all its reporters.

A grant needs the water levels of the group's fair shares, which depend on every reporter's
demand (`app.quota.allocator.Levels`). Read from every reporter on every report, they made
a report of a group of n reporters cost O(n), and a settling group, where every report
changes something, O(n²) an interval. So one report summarizes the group (reads every
reporter, O(n)) and stores the summary in the group's row; the reports after it read that
one row, until the group's inputs changed and a `SUMMARY_SHARE` of its reporters (a
thirty-second) have been granted from it since. A group of n reporters is therefore
summarized at most once every n/32 grants: a report costs the same for 10 reporters or
5,000 (with its share of the summaries, O(1) on average), and a group of up to 32 is
summarized afresh at every report after a change, as exactly as if every report read every
reporter. Between summaries, each grant moves the summary's shortfall by what it changed
(`Levels.settled`), and each report its sums of usage and demand (`GroupSummary.updated`).

A summary a moment old errs only in the fair shares it gives: a reporter's rise is bounded
by the headroom that the allocations in force leave free, which each grant reads from the
group's row exactly (see `app.quota.store`), so the quota bound never rests on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.quota.allocator import UNKNOWN, Levels
from app.quota.effective import Quotas
from app.quota.leases import shares_moved
from app.quota.statements import DEMAND, USAGE, Figures

__all__ = ["SUMMARY_SHARE", "DimensionSummary", "GroupSummary"]

SUMMARY_SHARE = 1 / 32  # of a group's reporters: grants from one summary once it changed


@dataclass(frozen=True, slots=True)
class DimensionSummary:
    """One dimension of a summary: its levels, and the sums the metrics show."""

    levels: Levels
    usage: float
    """The sum of the reporters' usage (per second)."""
    demand: float
    """The sum of the demands that are known."""


@dataclass(frozen=True, slots=True)
class GroupSummary:
    marker: int
    """The group's marker when summarized: a summary stands while it has not moved."""
    units: int
    """The reporters' namespaces it was made from (the allocator's reporters)."""
    grants: int
    """Reports granted from it since it was made."""
    reporters: int
    dimensions: tuple[DimensionSummary | None, ...]
    """Per dimension, None where the group does not limit it."""
    woken: tuple[Levels | None, ...] = ()
    """Per dimension, the levels as at the group's last wake (`app.quota.leases`); empty
    when that was this summary's own."""

    def wake(self, previous: GroupSummary | None) -> tuple[GroupSummary, bool]:
        """This new summary, with the levels of the group's last wake carried over from
        the ``previous`` summary, and whether the shares moved enough since those that
        the group's reporters must learn theirs now (then this summary's levels are the
        last wake's). A first summary, or one under new quotas (those are pushed as admin
        changes), wakes nobody."""
        if previous is None or previous.quotas != self.quotas:
            return self, False
        for before, now in zip(previous.references, self.dimensions, strict=True):
            if before is not None and now is not None and shares_moved(before, now.levels):
                return self, True
        woken = previous.references
        summary = GroupSummary(
            self.marker, self.units, self.grants, self.reporters, self.dimensions, woken
        )
        return summary, False

    @property
    def references(self) -> tuple[Levels | None, ...]:
        """Per dimension, the levels of the group's last wake."""
        return self.woken or tuple(None if d is None else d.levels for d in self.dimensions)

    def holds(self, marker: int, quotas: Quotas, *, changing: bool) -> bool:
        """Whether grants may still be made from it: made under the same quotas, and either
        nothing changed since (the group's marker, and ``changing``: what the reporter
        reports now), or fewer than a `SUMMARY_SHARE` of the reporters it saw have been
        granted from it."""
        if self.quotas != tuple(quotas):
            return False
        unchanged = marker == self.marker and not changing
        return unchanged or self.grants < SUMMARY_SHARE * self.units

    def updated(self, before: Sequence[Figures | None], after: Sequence[Figures]) -> GroupSummary:
        """The summary with one reporter's figures as it reports them now (``after``, per
        namespace) in place of what they were in the group (``before``, None where the row
        was not in it), so that the sums the metrics show follow every report. The levels
        stay as they were: they are made anew only when the summary no longer holds."""
        dimensions: list[DimensionSummary | None] = []
        for index, dimension in enumerate(self.dimensions):
            if dimension is None:
                dimensions.append(None)
                continue
            usage, demand = dimension.usage, dimension.demand
            for old, new in zip(before, after, strict=True):
                usage += new[3 * index + USAGE] - (0.0 if old is None else old[3 * index + USAGE])
                demand += _known(new[3 * index + DEMAND]) - (
                    0.0 if old is None else _known(old[3 * index + DEMAND])
                )
            dimensions.append(replace(dimension, usage=max(usage, 0.0), demand=max(demand, 0.0)))
        joined = all(old is None for old in before)
        return replace(
            self,
            grants=self.grants + 1,
            reporters=self.reporters + joined,
            dimensions=tuple(dimensions),
        )

    @property
    def quotas(self) -> Quotas:
        return tuple(None if d is None else d.levels.quota for d in self.dimensions)

    def to_json(self) -> str:
        """The summary as compact JSON: an array of its members in order, each dimension's
        an array too (its levels' members, then its sums), and infinite levels written as
        ``Infinity`` (Python's JSON reads and writes it; the column is read only here). A
        broker's report writes thousands, and reads as many of the ones before."""
        raw: list[Any] = [
            self.marker,
            self.units,
            self.grants,
            self.reporters,
            [
                None if d is None else [*_levels(d.levels), d.usage, d.demand]
                for d in self.dimensions
            ],
        ]
        if self.woken:
            raw.append([None if w is None else _levels(w) for w in self.woken])
        return json.dumps(raw, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> GroupSummary:
        """The summary of `to_json`'s JSON, or of the objects it wrote before (whose
        infinite levels were nulls)."""
        raw = json.loads(text)
        if isinstance(raw, dict):
            return _from_objects(raw)
        marker, units, grants, reporters, dimensions, *woken = raw
        return cls(
            marker,
            units,
            grants,
            reporters,
            tuple(
                None
                if d is None
                else DimensionSummary(Levels(d[0], units, d[1], d[2], d[3], d[4], d[5]), d[6], d[7])
                for d in dimensions
            ),
            tuple(
                None if w is None else Levels(w[0], units, w[1], w[2], w[3], w[4], w[5])
                for w in woken[0]
            )
            if woken
            else (),
        )


def _levels(levels: Levels) -> list[Any]:
    return [
        levels.quota,
        levels.group_level,
        levels.namespace_levels,
        levels.room,
        levels.shortfall,
        levels.unknown,
    ]


def _from_objects(raw: dict[str, Any]) -> GroupSummary:
    units = raw["units"]
    return GroupSummary(
        raw["marker"],
        units,
        raw["grants"],
        raw["reporters"],
        tuple(
            None if d is None else DimensionSummary(_levels_of(d, units), d["usage"], d["demand"])
            for d in raw["dimensions"]
        ),
        tuple(None if w is None else _levels_of(w, units) for w in raw.get("woken", ())),
    )


def _unlevel(value: float | None) -> float:
    return math.inf if value is None else value


def _levels_of(raw: dict[str, Any], reporters: int) -> Levels:
    return Levels(
        raw["quota"],
        reporters,
        _unlevel(raw["level"]),
        {ns: _unlevel(level) for ns, level in raw["namespaces"].items()},
        raw["room"],
        raw["shortfall"],
        raw["unknown"],
    )


def _known(demand: float) -> float:
    return demand if demand < UNKNOWN else 0.0
