"""Units counted: what a group's reporters say they used, added up per group and dimension as
each report is accepted, twice: as Prometheus counters (`UsageCounter.totals`), and spread
over the time each report covers in buckets of the history's resolution, which each process
writes once no report can still cover them (`span_s` after they end) for `app.quota.history`
to sum. Why: docs/design.md ("Usage history and metrics").
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Bucket", "UsageCounter"]

_DIMENSIONS = 4  # `rgspark.wire.DIMENSIONS`, in its order


@dataclass(frozen=True, slots=True)
class Bucket:
    """A group's units counted in one bucket: [start, start + resolution)."""

    group: str
    start: float
    """Seconds since the epoch, a multiple of the resolution."""
    units: tuple[float, ...]


class _Counts:
    """Units per group (a row each, in `UsageCounter`'s order) and dimension, and which
    groups a report counted in at all."""

    __slots__ = ("touched", "units")

    def __init__(self, rows: int) -> None:
        self.units: npt.NDArray[np.float64] = np.zeros((rows, _DIMENSIONS))
        self.touched: npt.NDArray[np.bool_] = np.zeros(rows, dtype=bool)

    def grow(self, rows: int) -> None:
        more = rows - len(self.touched)
        if more > 0:
            self.units = np.concatenate([self.units, np.zeros((more, _DIMENSIONS))])
            self.touched = np.concatenate([self.touched, np.zeros(more, dtype=bool)])

    def add(self, rows: npt.NDArray[np.intp], units: npt.NDArray[np.float64]) -> None:
        self.units[rows] += units  # a report names each group once: no row twice
        self.touched[rows] = True


class UsageCounter:
    """The units reported to this server process, per group and dimension.

    Kept as arrays, a row per group: a broker's report of thousands of groups, spread over a
    minute's buckets, is a few vector additions rather than a Python loop per group and
    bucket, which cost as much as the rest of a steady report."""

    def __init__(self, resolution_s: float, span_s: float) -> None:
        self.resolution_s = resolution_s
        self.span_s = span_s
        self._lock = threading.Lock()  # reports are handled on several threads
        self._rows: dict[str, int] = {}
        self._groups: list[str] = []
        self._totals = _Counts(0)
        self._buckets: dict[int, _Counts] = {}  # by the bucket's index

    def add(self, used: Mapping[str, Sequence[float]], now: float, covered_s: float) -> None:
        """Count each group's ``used`` units, used over the ``covered_s`` seconds to ``now``."""
        if not used:
            return
        span = min(max(covered_s, 0.0), self.span_s)
        shares = self._spread(now - span, now)
        units = np.array(list(used.values()), dtype=np.float64)
        with self._lock:
            rows = self._rows_of(used)
            self._totals.add(rows, units)
            for index, share in shares:
                self._bucket(index).add(rows, units * share)

    def _rows_of(self, groups: Iterable[str]) -> npt.NDArray[np.intp]:
        known, rows = self._rows, []
        for group in groups:
            row = known.get(group)
            if row is None:
                row = known[group] = len(self._groups)
                self._groups.append(group)
            rows.append(row)
        if len(self._groups) > len(self._totals.touched):
            capacity = max(2 * len(self._groups), 16)  # grown in doublings, not at every group
            self._totals.grow(capacity)
            for counts in self._buckets.values():
                counts.grow(capacity)
        return np.array(rows, dtype=np.intp)

    def _bucket(self, index: int) -> _Counts:
        counts = self._buckets.get(index)
        if counts is None:
            counts = self._buckets[index] = _Counts(len(self._totals.touched))
        return counts

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
            return self._listed(self._totals)

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
                rows = self._rows_of([bucket.group])
                self._bucket(index).add(rows, np.array([bucket.units], dtype=np.float64))

    def _take(self, indices: list[int]) -> list[Bucket]:
        taken = []
        for index in sorted(indices):
            start = index * self.resolution_s
            for group, units in self._listed(self._buckets.pop(index)).items():
                taken.append(Bucket(group, start, units))
        return taken

    def _listed(self, counts: _Counts) -> dict[str, tuple[float, ...]]:
        """The groups counted in, with their units."""
        rows = np.flatnonzero(counts.touched)
        groups = self._groups
        return {
            groups[row]: tuple(units)
            for row, units in zip(rows.tolist(), counts.units[rows].tolist(), strict=True)
        }
