"""A group's summary: the water levels of its fair shares (`app.quota.allocator.Levels`) and its
sums of usage and demand, made from every reporter's row and stored in the group's row so that
a grant reads that one row; made anew once the group's inputs changed and a `SUMMARY_SHARE` of
its reporters were granted from it, and settled by each grant in between.
Why: docs/design.md ("The bound under concurrency").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_core import to_json

from app.quota.allocator import Levels
from app.quota.leases import shares_moved
from app.quota.tuning import SUMMARY_SHARE
from app.quota.types import DEMANDS, USAGES, Figures, GroupQuotas
from rgspark.wire import UNKNOWN_DEMAND

__all__ = ["DimensionSummary", "GroupSummary"]

Previous = tuple[GroupQuotas, tuple[Levels | None, ...]]
"""What a summary's successor reads of it (`GroupSummary.wake_after`): its quotas, and the
levels of the group's last wake."""


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
        return self.wake_after(None if previous is None else previous.as_previous())

    def as_previous(self) -> Previous:
        """What `wake` reads of a summary that comes before another."""
        return self.quotas, self.references

    def wake_after(self, previous: Previous | None) -> tuple[GroupSummary, bool]:
        """`wake`, after a summary of which only what it reads is known (`as_previous`,
        `GroupSummary.read`)."""
        if previous is None or previous[0] != self.quotas:
            return self, False
        woken = previous[1]
        for before, now in zip(woken, self.dimensions, strict=True):
            if before is not None and now is not None and shares_moved(before, now.levels):
                return self, True
        summary = GroupSummary(
            self.marker, self.units, self.grants, self.reporters, self.dimensions, woken
        )
        return summary, False

    @property
    def references(self) -> tuple[Levels | None, ...]:
        """Per dimension, the levels of the group's last wake."""
        return self.woken or tuple(None if d is None else d.levels for d in self.dimensions)

    def holds(self, marker: int, quotas: GroupQuotas, *, changing: bool) -> bool:
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
                usage_at, demand_at = USAGES[index], DEMANDS[index]
                usage += new[usage_at] - (0.0 if old is None else old[usage_at])
                demand += _known(new[demand_at]) - (0.0 if old is None else _known(old[demand_at]))
            dimensions.append(replace(dimension, usage=max(usage, 0.0), demand=max(demand, 0.0)))
        joined = all(old is None for old in before)
        return replace(
            self,
            grants=self.grants + 1,
            reporters=self.reporters + joined,
            dimensions=tuple(dimensions),
        )

    @property
    def quotas(self) -> GroupQuotas:
        return tuple(None if d is None else d.levels.quota for d in self.dimensions)

    def to_json(self, shortfalls: Sequence[float] | None = None) -> str:
        """The summary as compact JSON: an array of its members in order, each dimension's
        an array too (its levels' members, then its sums), and infinite levels written as
        ``Infinity`` (Python's JSON reads it; the column is read only here). Arrays, not
        objects: a broker's report writes thousands, and reads as many of the ones before.

        ``shortfalls`` (per dimension) stand in for its levels' own: the summary as its
        grants settled it, without making the objects anew."""
        raw: list[Any] = [
            self.marker,
            self.units,
            self.grants,
            self.reporters,
            [
                None
                if d is None
                else [
                    *_levels(d.levels, None if shortfalls is None else shortfalls[index]),
                    d.usage,
                    d.demand,
                ]
                for index, d in enumerate(self.dimensions)
            ],
        ]
        if self.woken:
            raw.append([None if w is None else _levels(w) for w in self.woken])
        return to_json(raw, inf_nan_mode="constants").decode()

    @classmethod
    def read(
        cls, text: str, marker: int, quotas: GroupQuotas, *, changing: bool
    ) -> tuple[GroupSummary | None, Previous]:
        """The summary of `to_json`'s JSON if it `holds` (``marker``, ``quotas`` and
        ``changing`` as there), and what `wake_after` reads of it. A summary that no longer
        holds is read only that far: a broker's report reads thousands, most of which
        (a group of a few reporters, each of which changes it) no longer hold."""
        raw = json.loads(text)
        stored, units, grants, _, dimensions, *woken = raw
        before = tuple(None if d is None else d[0] for d in dimensions)
        # As `holds` has it.
        if before == tuple(quotas) and (
            (marker == stored and not changing) or grants < SUMMARY_SHARE * units
        ):
            summary = cls._of(raw)
            return summary, summary.as_previous()
        references = (
            tuple(
                None if w is None else Levels(w[0], units, w[1], w[2], w[3], w[4], w[5])
                for w in woken[0]
            )
            if woken
            else ()
        )
        if not references:
            references = tuple(
                None if d is None else Levels(d[0], units, d[1], d[2], d[3], d[4], d[5])
                for d in dimensions
            )
        return None, (before, references)

    @classmethod
    def from_json(cls, text: str) -> GroupSummary:
        """The summary of `to_json`'s JSON."""
        return cls._of(json.loads(text))

    @classmethod
    def _of(cls, raw: list[Any]) -> GroupSummary:
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


def _levels(levels: Levels, shortfall: float | None = None) -> list[Any]:
    return [
        levels.quota,
        levels.group_level,
        levels.namespace_levels,
        levels.room,
        levels.shortfall if shortfall is None else shortfall,
        levels.unknown,
    ]


def _known(demand: float) -> float:
    return demand if demand < UNKNOWN_DEMAND else 0.0
