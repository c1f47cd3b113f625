"""What one server process remembers between usage reports (namespaces' groups and limits, who
may report, reporters' rows and plans), and how it knows it still holds: on every report it
checks the admin generation (`app.generation`), the reporter's rows token and the groups'
markers, each changed on every write to what it guards. What a report learns is kept only once
its transaction commits. Why: docs/design.md ("The bound under concurrency").
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from app.quota.effective import Effective
from app.quota.tuning import MARKER_LOOK_S, MAX_MARKERS_READ, MAX_NAMESPACES, MAX_REPORTERS
from app.quota.types import Figures, GroupQuotas, NamespaceKey, Rates

# Rows, plans and answers are tuples of plain values, not objects: a process may remember
# millions of them, and Python's garbage collector stops looking at such tuples (and at dicts
# of them), where every object it tracks lengthens each of its full collections.


class Row(NamedTuple):
    """A reporter's stored row for one namespace."""

    figures: Figures
    group: str | None
    """The group it counts in."""
    planned: int | None
    """The group's marker when last planned."""


class Plan(NamedTuple):
    """One reporter's grants in one group, and what they were planned under."""

    id: int
    """Random: tells this plan from any other."""
    marker: int
    quotas: GroupQuotas
    rates: dict[NamespaceKey, Rates]
    fallbacks: dict[NamespaceKey, Rates]
    """Each namespace's fair shares (`allocator.granted`): what the reporter holds when
    the server is gone."""
    early: bool
    """Whether the reporter should report again soon (`allocator.granted`)."""
    counted: dict[NamespaceKey, Rates]
    """The namespaces whose rates fell where the reporter says what it enforces: the rates
    counted in force (and stored) until it says it applied the new ones, which are its old
    ones where they fell. Empty when none fell."""


class Answer(NamedTuple):
    """One namespace's part of a report's answer, and what it was built from."""

    generation: int
    plan: int
    """The id of the plan, or 0 when the namespace is not limited."""
    json: bytes


@dataclass(slots=True)
class ReporterState:
    """What a process knows of one reporter: its rows, its plans and its last answers."""

    token: int
    rows: dict[NamespaceKey, Row]
    plans: dict[str, Plan] = field(default_factory=dict)
    answers: dict[NamespaceKey, Answer] = field(default_factory=dict)
    last: LastAnswer | None = None
    observed_at: float = 0.0
    """When its groups' figures were last marked current in the metrics."""
    checked_at: float = 0.0
    """When the markers of its groups were last looked at."""
    full_check_at: float = 0.0
    """When every one of them was last compared with its rows."""
    lease_s: float = 0.0
    """How long its last answer holds (`app.quota.leases`), its pace aside."""
    pace_s: float = 0.0
    """The pace its last answer gave (`app.quota.pacing`; 0: none): it held that long, if
    longer than its lease."""
    releasing: bool = False
    """Whether a fall its plans granted is counted in force until it says it applied it
    (`Plan.counted`): its reports are then never steady, so that the one that says so
    releases the room."""


class LastAnswer(NamedTuple):
    """A whole answer's namespaces, given again as they were while nothing they come from
    changed: the namespaces asked about, the admin generation, and the plans."""

    refs: list[str]
    """The namespaces answered about, as the report named them."""
    generation: int
    namespaces: bytes
    """The JSON of the answer's namespaces, without their braces."""
    early: bool
    held: array[float]
    """What makes the next report steady: per namespace in `refs`, per dimension, the
    range of usage (per second) and then of demand that its stored row holds
    (`app.quota.figures.held_ranges`), as ``low, high, low, high``; NaN where no row is
    stored (nothing is then in range)."""


class ReportCache:
    """A process's memory of namespaces' effective groups and of recent reporters.

    Thread-safe: reports run in a thread pool. Reports of one reporter are serialized by the
    database (they lock its row), so only the namespace map is shared between reports.
    """

    def __init__(
        self, max_reporters: int = MAX_REPORTERS, max_namespaces: int = MAX_NAMESPACES
    ) -> None:
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._effective: dict[NamespaceKey, Effective] = {}
        self._authorized: set[tuple[str, NamespaceKey]] = set()  # (role, namespace)
        self._reporters: OrderedDict[str, ReporterState] = OrderedDict()
        self._markers_read: dict[str, tuple[int | None, float]] = {}
        """Per group, its marker (None: it has no row) and when it was read."""
        self.max_reporters = max_reporters
        self.max_namespaces = max_namespaces
        self.namespaces = 0
        """Namespaces of the reporters remembered, summed."""

    def markers_read(self, now: float, groups: Iterable[str]) -> dict[str, int] | None:
        """The groups' markers, as a report of the process read them lately enough to share
        (None unless every one of them was)."""
        read = self._markers_read
        found = {}
        for group in groups:
            known = read.get(group)
            if known is None or not 0 <= now - known[1] <= MARKER_LOOK_S:
                return None
            if known[0] is not None:
                found[group] = known[0]
        return found

    def remember_markers_read(
        self, now: float, groups: Iterable[str], found: dict[str, int]
    ) -> None:
        """Share the groups' markers (``found``: those that have one), read at ``now``."""
        read = self._markers_read
        if len(read) >= MAX_MARKERS_READ:
            read.clear()
        for group in groups:
            read[group] = (found.get(group), now)

    def forget_markers(self) -> None:
        """Forget the shared reads of markers: markers this process moved make them out of
        date."""
        self._markers_read = {}

    def effective(
        self, generation: int | None, keys: Iterable[NamespaceKey]
    ) -> dict[NamespaceKey, Effective]:
        """The effective groups known under ``generation`` (none when it is unknown)."""
        if generation is None:
            return {}
        with self._lock:
            self._current(generation)
            known = self._effective
        return {key: effective for key in keys if (effective := known.get(key)) is not None}

    def remember_effective(
        self, generation: int | None, found: dict[NamespaceKey, Effective]
    ) -> None:
        """Keep groups read after ``generation`` was: kept only while it is current."""
        with self._lock:
            if generation is not None and generation == self._generation:
                self._effective.update(found)

    def authorized(self, generation: int, role: str, keys: Iterable[NamespaceKey]) -> bool:
        """Whether ``role`` was found allowed to report for every one of ``keys`` under
        ``generation``."""
        with self._lock:
            self._current(generation)
            return all((role, key) in self._authorized for key in keys)

    def remember_authorized(self, generation: int, role: str, keys: Iterable[NamespaceKey]) -> None:
        """Keep that ``role`` may report for ``keys``, as checked after ``generation`` was
        read: kept only while it is current."""
        with self._lock:
            if generation == self._generation:
                self._authorized.update((role, key) for key in keys)

    def _current(self, generation: int) -> None:
        """Forget what was learnt under another generation (the lock held)."""
        if generation != self._generation:
            self._generation = generation
            self._effective = {}
            self._authorized = set()

    def reporter(self, reporter_id: str, token: int | None) -> ReporterState | None:
        """The reporter's state, if its rows are still as this process last saw them."""
        if token is None:
            return None
        with self._lock:
            state = self._reporters.get(reporter_id)
            if state is None or state.token != token:
                return None
            self._reporters.move_to_end(reporter_id)
            return state

    def lease(self, reporter_id: str) -> float | None:
        """The lease of the last answer this process gave the reporter (its pace aside), if
        it remembers."""
        with self._lock:
            state = self._reporters.get(reporter_id)
        return None if state is None else state.lease_s

    def last_answer(self, reporter_id: str, generation: int, refs: list[str]) -> LastAnswer | None:
        """The reporter's last answer, if it was about ``refs`` under ``generation``.

        Whatever became of the reporter's rows since, those namespaces exist, in the
        groups that answer gave.
        """
        with self._lock:
            state = self._reporters.get(reporter_id)
        last = None if state is None else state.last
        if last is None or last.generation != generation or last.refs != refs:
            return None
        return last

    def remember(self, reporter_id: str, state: ReporterState) -> None:
        with self._lock:
            before = self._reporters.pop(reporter_id, None)
            self.namespaces += len(state.rows) - (0 if before is None else len(before.rows))
            self._reporters[reporter_id] = state
            # The least recently reporting first; the one just remembered stays, whatever
            # it holds.
            while len(self._reporters) > 1 and (
                len(self._reporters) > self.max_reporters or self.namespaces > self.max_namespaces
            ):
                _, forgotten = self._reporters.popitem(last=False)
                self.namespaces -= len(forgotten.rows)

    def forget(self, reporter_ids: Iterable[str]) -> None:
        with self._lock:
            for reporter_id in reporter_ids:
                forgotten = self._reporters.pop(reporter_id, None)
                if forgotten is not None:
                    self.namespaces -= len(forgotten.rows)
