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
(`Levels.settled_shortfall`), and each report its sums of usage and demand (`GroupSummary.updated`).

A summary a moment old errs only in the fair shares it gives: a reporter's rise is bounded
by the headroom that the allocations in force leave free, which each grant reads from the
group's row exactly (see `app.quota.store`), so the quota bound never rests on it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.quota.allocator import Levels
from app.quota.leases import shares_moved
from app.quota.types import DEMANDS, USAGES, Figures, GroupQuotas
from rgspark.wire import UNKNOWN_DEMAND

__all__ = ["SUMMARY_SHARE", "DimensionSummary", "GroupSummary"]

Previous = tuple[GroupQuotas, tuple[Levels | None, ...]]
"""What a summary's successor reads of it (`GroupSummary.wake_after`): its quotas, and the
levels of the group's last wake."""
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
        ``Infinity`` (Python's JSON reads and writes it; the column is read only here). A
        broker's report writes thousands, and reads as many of the ones before.

        ``shortfalls`` (per dimension) stand in for its levels' own: the summary as its
        grants settled it, without the objects. Written as `json.dumps` writes the arrays,
        by hand: a float is its ``repr``, which is what `json.dumps` writes."""
        dimensions = self.dimensions
        parts = []
        for index, d in enumerate(dimensions):
            if d is None:
                parts.append("null")
                continue
            levels = d.levels
            shortfall = levels.shortfall if shortfalls is None else shortfalls[index]
            usage, demand = d.usage, d.demand
            if usage.__class__ is not float or demand.__class__ is not float:
                return self._dumped(shortfalls)
            part = _levels_json(levels, shortfall)
            if part is None:
                return self._dumped(shortfalls)
            parts.append(f"{part},{_float(usage)},{_float(demand)}]")
        head = f"[{self.marker},{self.units},{self.grants},{self.reporters},[{','.join(parts)}]"
        if not all(value.__class__ is int for value in (self.marker, self.units, self.grants)):
            return self._dumped(shortfalls)
        if self.reporters.__class__ is not int:
            return self._dumped(shortfalls)
        if not self.woken:
            return head + "]"
        woken = []
        for was in self.woken:
            if was is None:
                woken.append("null")
                continue
            part = _levels_json(was, was.shortfall)
            if part is None:
                return self._dumped(shortfalls)
            woken.append(part + "]")
        return f"{head},[{','.join(woken)}]]"

    def _dumped(self, shortfalls: Sequence[float] | None) -> str:
        """`to_json` through `json.dumps`: for values of other types than it writes."""
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
        return json.dumps(raw, separators=(",", ":"))

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


_string = json.encoder.encode_basestring_ascii  # what `json.dumps` quotes strings with
# A float's repr is what `json.dumps` writes, but for these.
_SPECIAL = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
_special = _SPECIAL.get


def _float(value: float) -> str:
    """A float as `json.dumps` writes it."""
    text = repr(value)
    return _special(text, text)


def _levels_json(levels: Levels, shortfall: float) -> str | None:
    """The levels' array as `json.dumps` writes it, without its closing bracket (a
    dimension's sums follow them); None for values of other types than the float, str and
    bool it writes by hand."""
    quota, group_level, room, unknown = (
        levels.quota,
        levels.group_level,
        levels.room,
        levels.unknown,
    )
    if not (
        quota.__class__ is float
        and group_level.__class__ is float
        and room.__class__ is float
        and shortfall.__class__ is float
        and unknown.__class__ is bool
    ):
        return None
    namespaces = []
    for namespace, level in levels.namespace_levels.items():
        if namespace.__class__ is not str or level.__class__ is not float:
            return None
        text = repr(level)
        namespaces.append(f"{_string(namespace)}:{_special(text, text)}")
    texts = [repr(quota), repr(group_level), repr(room), repr(shortfall)]
    quota_text, level_text, room_text, shortfall_text = map(_special, texts, texts)
    return (
        f"[{quota_text},{level_text},{{{','.join(namespaces)}}},"
        f"{room_text},{shortfall_text},{'true' if unknown else 'false'}"
    )


def _known(demand: float) -> float:
    return demand if demand < UNKNOWN_DEMAND else 0.0
