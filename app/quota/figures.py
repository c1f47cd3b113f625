"""A report's figures against the stored ones: which `moved` out of their `held_range` and are
recorded anew, a demand held more widely where it changes no grant (`rgspark.wire`). Every
report asks this of every namespace it carries, so a steady one is checked against ranges kept
in one flat array (`held_ranges`, `held_still`), a namespace whose row is at hand against the
row (`moved_since`). Why: docs/design.md ("The maths: from demands to grants").
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from typing import cast

from app.quota.cache import Row
from app.quota.schemas import DimensionUsage, NamespaceUsage, UsageReport
from app.quota.types import ALLOCATIONS, DEMANDS, USAGES, Figures, NamespaceKey, Rates
from rgspark.wire import DIMENSIONS, demand_range, fell, held_range, moved

_NOT_SAID: Rates = (None,) * len(DIMENSIONS)

__all__ = [
    "enforced_rates",
    "figures_of",
    "held_ranges",
    "held_still",
    "moved_since",
    "released",
    "reported_figures",
]


def figures_of(report: UsageReport) -> Iterable[Mapping[str, DimensionUsage | None]]:
    """Each namespace's figures, in the report's order, by dimension name."""
    return cast(Iterable[Mapping[str, DimensionUsage | None]], report.namespaces.values())


def held_still(
    held: array[float], namespaces: Iterable[Mapping[str, DimensionUsage | None]], covered_s: float
) -> bool:
    """Whether every namespace's figures are within the ranges its row holds (``held``, in
    the same order): so no figure moved enough to be recorded anew.

    Asked only under the admin generation of the reporter's last answer, whose report put
    every row in its namespace's group: the groups need no second look. Two comparisons a
    figure, read in order from one flat array: this runs over every namespace of every
    steady report.
    """
    bounds = iter(held)
    # A dimension's ranges: low, high, low, high.
    ranges = zip(bounds, bounds, bounds, bounds, strict=True)
    for usage in namespaces:
        for name in DIMENSIONS:
            low_used, high_used, low_demand, high_demand = next(ranges)
            figures = usage.get(name)
            if figures is None:  # left out: counts as 0
                if not (low_used <= 0.0 <= high_used and low_demand <= 0.0 <= high_demand):
                    return False
            elif not (
                low_used <= figures["used"] / covered_s <= high_used
                and low_demand <= figures["demand"] <= high_demand
            ):
                return False
    return True


def held_ranges(
    keys: Iterable[NamespaceKey], rows: dict[NamespaceKey, Row], fair: Iterable[Rates]
) -> array[float]:
    """The ranges `held_still` checks a report against; ``fair``, each namespace's fair
    shares as last planned (None where its group does not limit a dimension)."""
    held = array("d")
    for key, shares in zip(keys, fair, strict=True):
        row = rows.get(key)
        if row is None:
            held.extend(_NOT_HELD)
            continue
        figures = row.figures
        for usage_at, demand_at, share in zip(USAGES, DEMANDS, shares, strict=True):
            held.extend(held_range(figures[usage_at]))
            held.extend(demand_range(figures[demand_at], share))
    return held


_NOT_HELD = array("d", [math.nan] * 4 * len(DIMENSIONS))


def reported_figures(usage: NamespaceUsage, covered_s: float, stored: Figures | None) -> Figures:
    """A namespace's figures as reported, per second, with the stored allocations."""
    figures: list[float | None] = []
    dims = cast(dict[str, DimensionUsage | None], usage)
    for name, allocation_at in zip(DIMENSIONS, ALLOCATIONS, strict=True):
        reported = dims.get(name)
        allocation = None if stored is None else stored[allocation_at]
        if reported is None:
            figures += (0.0, 0.0, allocation)
        else:
            figures += (reported["used"] / covered_s, reported["demand"], allocation)
    return tuple(figures)


def moved_since(
    stored: Figures, usage: NamespaceUsage, covered_s: float, fair: Rates | None = None
) -> bool:
    """Whether a reported usage or demand moved out of the `held_range` of what is stored
    (a dimension left out counts as 0); a demand out of its `demand_range`, given the
    reporter's fair shares as last planned (``fair``; None: not known, `held_range`)."""
    dims = cast(dict[str, DimensionUsage | None], usage)
    for index, (name, usage_at, demand_at) in enumerate(
        zip(DIMENSIONS, USAGES, DEMANDS, strict=True)
    ):
        figures = dims.get(name)
        used, demand = (
            (0.0, 0.0) if figures is None else (figures["used"] / covered_s, figures["demand"])
        )
        if moved(stored[usage_at], used):
            return True
        before = stored[demand_at]
        low, high = held_range(before) if fair is None else demand_range(before, fair[index])
        if not low <= demand <= high:
            return True
    return False


def enforced_rates(usage: NamespaceUsage) -> Rates:
    """Per dimension, the rate the reporter says it enforces: None where it says nothing
    (an older reporter, or a dimension it does not use), ``math.inf`` where unlimited."""
    dims = cast(dict[str, DimensionUsage | None], usage)
    rates: list[float | None] | None = None
    for index, name in enumerate(DIMENSIONS):
        figures = dims.get(name)
        if figures is None or "allocation" not in figures:
            continue
        if rates is None:
            rates = [None] * len(DIMENSIONS)
        allocation = figures["allocation"]
        rates[index] = math.inf if allocation < 0 else allocation
    return _NOT_SAID if rates is None else tuple(rates)


def released(figures: Figures, enforced: Rates) -> Figures | None:
    """``figures`` with each allocation down to what the reporter says it enforces where
    that is lower (a fall it was granted and has applied since); None if none is."""
    lowered: list[float | None] | None = None
    for at, rate in zip(ALLOCATIONS, enforced, strict=True):
        stored = figures[at]
        if rate is None or stored is None or not fell(stored, rate):
            continue
        if lowered is None:
            lowered = list(figures)
        lowered[at] = rate
    return None if lowered is None else tuple(lowered)
