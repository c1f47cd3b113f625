"""Units counted: what a group's reporters say they used, for the figures people read.

A group's usage is never a report's ``used / intervalMs``: reports sent at once (a wake, a
demand change) cover a few milliseconds, steady ones a whole lease, and a rate read off
either swings far from what went through. Instead each accepted report's ``used`` is added
up per group and dimension, twice:

- **Counters** (`UsageCounter.totals`): every unit this process was told of, as
  Prometheus counters (``rg_resource_group_used_total``), read with ``rate()``.
- **Counts by moment**, for the usage history: a report's units are spread evenly over the
  time they were used in (the ``intervalMs`` before it arrived), in buckets of the history's
  resolution, so that a steady worker's report of a whole lease does not land in one sample.
  A bucket is complete once no report can still cover it: a report covers at most
  `span_s` (the longest a reporter stays alive between reports), so ``span_s`` after the
  bucket ends. Then each server process writes its part (`app.quota.history.write_counts`),
  and the history sums every process's.

A report covering more than ``span_s`` (its worker was cut off from the server, and
enforced on its own meanwhile) is counted over the last ``span_s`` of it: the units went
through, and a history that dropped them would show less than the workers sent.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Bucket", "UsageCounter"]

Units = list[float]
"""Per dimension, in `rgspark.wire.DIMENSIONS` order."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """A group's units counted in one bucket: [start, start + resolution)."""

    group: str
    start: float
    """Seconds since the epoch, a multiple of the resolution."""
    units: tuple[float, ...]


class UsageCounter:
    """The units reported to this server process, per group and dimension."""

    def __init__(self, resolution_s: float, span_s: float) -> None:
        self.resolution_s = resolution_s
        self.span_s = span_s
        self._lock = threading.Lock()  # reports are handled on several threads
        self._totals: dict[str, Units] = {}
        self._buckets: dict[int, dict[str, Units]] = {}  # by the bucket's index

    def add(self, used: Mapping[str, Sequence[float]], now: float, covered_s: float) -> None:
        """Count each group's ``used`` units, used over the ``covered_s`` seconds to ``now``."""
        if not used:
            return
        span = min(max(covered_s, 0.0), self.span_s)
        shares = self._spread(now - span, now)
        with self._lock:
            # A broker's report of thousands of groups, spread over a minute's buckets: the
            # buckets looked up once, each group's units added in place.
            buckets = [(self._buckets.setdefault(b, {}), share) for b, share in shares]
            buckets.append((self._totals, 1.0))
            for group, (a, b, c, d) in used.items():  # the four dimensions
                for counts, share in buckets:
                    counted = counts.get(group)
                    if counted is None:
                        counts[group] = [a * share, b * share, c * share, d * share]
                    else:
                        counted[0] += a * share
                        counted[1] += b * share
                        counted[2] += c * share
                        counted[3] += d * share

    def _spread(self, start: float, end: float) -> list[tuple[int, float]]:
        """The buckets that [start, end] overlaps, each with its share of the span."""
        resolution = self.resolution_s
        first = math.floor(start / resolution)
        if end <= start:
            return [(first, 1.0)]
        last = max(first, math.ceil(end / resolution) - 1)
        shares = []
        for bucket in range(first, last + 1):
            overlap = min(end, (bucket + 1) * resolution) - max(start, bucket * resolution)
            if overlap > 0:
                shares.append((bucket, overlap / (end - start)))
        return shares

    def totals(self) -> dict[str, tuple[float, ...]]:
        """Every unit counted so far, per group and dimension: monotonic counters."""
        with self._lock:
            return {group: tuple(units) for group, units in self._totals.items()}

    def complete(self, now: float) -> list[Bucket]:
        """Take the buckets that no report arriving from ``now`` on can add to."""
        resolution = self.resolution_s
        with self._lock:
            done = [b for b in self._buckets if (b + 1) * resolution + self.span_s <= now]
            return self._take(done)

    def take_all(self) -> list[Bucket]:
        """Take every bucket, complete or not (the process is stopping)."""
        with self._lock:
            return self._take(list(self._buckets))

    def put_back(self, buckets: Sequence[Bucket]) -> None:
        """Count taken buckets again (their write failed): the next write takes them."""
        with self._lock:
            for bucket in buckets:
                index = round(bucket.start / self.resolution_s)
                _add(self._buckets.setdefault(index, {}), bucket.group, bucket.units, 1.0)

    def _take(self, indices: list[int]) -> list[Bucket]:
        taken = []
        for index in sorted(indices):
            start = index * self.resolution_s
            for group, units in self._buckets.pop(index).items():
                taken.append(Bucket(group, start, tuple(units)))
        return taken


def _add(counts: dict[str, Units], group: str, units: Sequence[float], share: float) -> None:
    counted = counts.get(group)
    if counted is None:
        counts[group] = [amount * share for amount in units]
    else:
        for index, amount in enumerate(units):
            counted[index] += amount * share
