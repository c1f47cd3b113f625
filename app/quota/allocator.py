"""The allocator: a group's configured rate and its reporters' fresh reports in, rates out.

Pure: no I/O, no clock. The store calls it once per group and dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Report:
    """What one reporter said in its latest fresh report, for one dimension of one group."""

    reporter: str
    usage: float
    """Units per second it used over its last report interval."""
    demand: float
    """Units per second it would have used unthrottled (usage plus what it was held back from)."""
    allocation: float | None
    """The rate it enforces now, as last granted; None before its first grant."""


def allocate(quota: float, reports: Sequence[Report]) -> dict[str, float]:
    """Each reporter's allocated rate; ``quota`` is a positive rate per second."""
    if not reports:
        return {}
    shares: dict[str, float] = {}
    remaining, waiting = float(quota), sorted(reports, key=lambda report: report.demand)
    while waiting:
        level = remaining / len(waiting)
        report = waiting.pop(0)
        shares[report.reporter] = min(report.demand, level)
        remaining -= shares[report.reporter]
    spare = remaining / len(reports)
    return {reporter: share + spare for reporter, share in shares.items()}
