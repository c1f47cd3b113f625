"""What went through the Spark helpers: running totals, and the figures of each action.

Tasks add what they charged to a Spark accumulator, under the action that ran them: a
DataFrame action's SQL execution (a streaming query's micro-batch is one), or else the RDD
action's operation scope. The driver merges what tasks send as they finish, so an action's
figures are complete once it has returned.

A Spark Connect session has no accumulators: its tasks count on the admin server instead
(`rgspark._server_stats`), and the driver reads the sums from there.

Imports nothing of PySpark, so `import rgspark` stays light.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ._exceptions import FiguresNotCountedError
from .wire import KEPT_ACTIONS

if TYPE_CHECKING:
    from pyspark import Accumulator, SparkContext
    from pyspark.accumulators import AccumulatorParam

    _Param = AccumulatorParam["Figures"]
else:
    _Param = object

__all__ = ["ActionStats", "Entry", "Figures", "ThrottleStats", "add_entry", "padded"]

# An action's figures: [rows, bytes, held seconds, start, end, pushbacks, pushback seconds]
# (start and end in seconds since the epoch). The last two were added later: an entry
# without them has none.
Entry = list[float]
ENTRY_LENGTH = 7

NOT_COUNTED = (
    "These stats were made without a SparkContext, so nothing counts in them: take the "
    "helpers' own, client.stats[kind]"
)


class Counter(Protocol):
    """Where tasks count when there is no accumulator (`rgspark._server_stats.ServerCount`)."""

    def add(self, action: str, entry: Entry) -> None: ...

    def flush(self) -> None: ...

    def read(self) -> Figures: ...


class ActionStats(NamedTuple):
    """What one action (or one micro-batch of a streaming query) sent through."""

    #: Rows, counted as msgs.
    rows: int
    #: Arrow bytes (`throttle`), or what the sink's `size` said.
    bytes: int
    #: Seconds from the first slice charged to the last one released, over all its tasks.
    wall_s: float
    #: Seconds its tasks were held back, summed over tasks: with tasks held side by side,
    #: more than `wall_s`.
    task_throttled_s: float
    # (Pushback is counted in the totals, `ThrottleStats.pushbacks` and `pushback_s`: a
    # field more would break code that unpacks these four.)


class ThrottleStats:
    """What went through one kind of traffic (driver-side): running totals over every action
    since it was made, and `last`, the figures of the last action.

    ``client.stats["publish"]`` is made by the first helper that runs for the client (`throttle`,
    `throttled_sink`, `throttled`); pass one to `throttled_sink` as ``stats=`` to count apart.
    The figures are complete once an action has returned.

    A classic session's tasks count in an accumulator (made with the session's
    `context`). A Spark Connect session has none: the helpers make its stats with
    `rgspark._server_stats.stats_on_server`, and its tasks count on the admin server,
    under the client's job. Made with `context` None otherwise, they count nothing, and
    reading a figure raises `FiguresNotCountedError`.
    """

    __slots__ = ("_figures", "_server", "kind")

    def __init__(
        self, context: SparkContext | None, kind: str, *, server: Counter | None = None
    ) -> None:
        """``server``: where its tasks count without an accumulator (``context`` None)."""
        self.kind = kind
        self._figures: Accumulator[Figures] | None = (
            None if context is None else context.accumulator(Figures(), FiguresParam())
        )
        self._server = server

    @property
    def counted(self) -> bool:
        """Whether the figures are counted."""
        return self._figures is not None or self._server is not None

    def add(
        self,
        rows: int,
        nbytes: int,
        waited_s: float,
        pushbacks: int = 0,
        pushback_s: float = 0.0,
    ) -> None:
        """Count a slice a task sent, that waited `waited_s` for the group's limits before
        it was released, after `pushbacks` pushbacks that cost it `pushback_s` seconds."""
        now = time.time()
        start = now - waited_s - pushback_s
        entry = [rows, nbytes, waited_s, start, now, pushbacks, pushback_s]
        if self._figures is not None:
            self._figures.add(Figures.of(_action(), entry))
        elif self._server is not None:
            self._server.add(_action(), entry)

    def flush(self) -> None:
        """A task's end: what it counted on the server is sent now (an accumulator's is
        sent by Spark with the task's result)."""
        if self._server is not None:
            self._server.flush()

    @property
    def rows(self) -> int:
        """Rows, over every action."""
        return self._value().rows

    @property
    def bytes(self) -> int:
        """Bytes, over every action."""
        return self._value().bytes

    @property
    def task_throttled_s(self) -> float:
        """Seconds tasks were held back, summed over the tasks of every action: not wall
        time (see `last` for an action's)."""
        return self._value().held_s

    @property
    def pushbacks(self) -> int:
        """Times the destination pushed back, over every action."""
        return self._value().pushbacks

    @property
    def pushback_s(self) -> float:
        """Seconds tasks waited because of pushback (retry delays and the lowered rate's
        waits), summed over the tasks of every action."""
        return self._value().pushback_s

    @property
    def last(self) -> ActionStats | None:
        """The last action's figures (the one that started last); None before any."""
        return self._value().last()

    def _value(self) -> Figures:
        if self._figures is not None:
            return self._figures.value
        if self._server is not None:
            return self._server.read()
        raise FiguresNotCountedError(NOT_COUNTED)

    def __repr__(self) -> str:
        if not self.counted:
            return f"ThrottleStats(kind={self.kind!r}, not counted)"
        figures = self._value()  # read once: on the server, a call
        return (
            f"ThrottleStats(kind={self.kind!r}, rows={figures.rows}, bytes={figures.bytes}, "
            f"task_throttled_s={figures.held_s:.3f}, pushbacks={figures.pushbacks}, "
            f"pushback_s={figures.pushback_s:.3f}, last={figures.last()})"
        )


class Figures:
    """The accumulator's value: totals, and per action an `Entry`."""

    __slots__ = ("actions", "bytes", "held_s", "pushback_s", "pushbacks", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0
        self.held_s = 0.0
        self.pushbacks = 0
        self.pushback_s = 0.0
        self.actions: dict[str, Entry] = {}

    def __setstate__(self, state: tuple[None, dict[str, object]]) -> None:
        # Pickled by a worker of an rgspark without the pushback figures: it had none.
        self.pushbacks, self.pushback_s = 0, 0.0
        for name, value in state[1].items():
            setattr(self, name, value)

    @classmethod
    def of(cls, action: str, entry: Entry) -> Figures:
        """The figures of one action's `entry`."""
        figures = cls()
        full = padded(entry)
        figures.rows, figures.bytes, figures.held_s = int(full[0]), int(full[1]), full[2]
        figures.pushbacks, figures.pushback_s = int(full[5]), full[6]
        figures.actions[action] = full
        return figures

    def last(self) -> ActionStats | None:
        """The figures of the action that started last; None before any."""
        if not self.actions:
            return None
        rows, nbytes, held_s, start, end = max(self.actions.values(), key=lambda e: e[3])[:5]
        return ActionStats(int(rows), int(nbytes), end - start, held_s)

    def merge(self, other: Figures) -> Figures:
        self.rows += other.rows
        self.bytes += other.bytes
        self.held_s += other.held_s
        self.pushbacks += other.pushbacks
        self.pushback_s += other.pushback_s
        for action, other_entry in other.actions.items():
            entry = self.actions.get(action)
            if entry is None:
                self.actions[action] = padded(other_entry)
            else:
                add_entry(entry, other_entry)
        if len(self.actions) > KEPT_ACTIONS:  # on the driver: forget the oldest
            oldest = sorted(self.actions, key=lambda action: self.actions[action][3])
            for action in oldest[: len(self.actions) - KEPT_ACTIONS]:
                del self.actions[action]
        return self


def padded(entry: Entry) -> Entry:
    """A copy of `entry` with every figure (those it lacks: 0)."""
    return [*entry, *[0.0] * (ENTRY_LENGTH - len(entry))]


def add_entry(entry: Entry, other: Entry) -> None:
    """Add an action's figures to `entry` (made `ENTRY_LENGTH` long): sums, and the earlier
    start and later end."""
    entry.extend([0.0] * (ENTRY_LENGTH - len(entry)))
    other = padded(other)
    for i in (0, 1, 2, 5, 6):
        entry[i] += other[i]
    entry[3] = min(entry[3], other[3])
    entry[4] = max(entry[4], other[4])


class FiguresParam(_Param):
    """How Spark adds `Figures` (an ``AccumulatorParam``, without importing PySpark)."""

    def zero(self, value: Figures) -> Figures:
        return Figures()

    def addInPlace(self, value1: Figures, value2: Figures) -> Figures:
        return value1.merge(value2)


def _action() -> str:
    """The action the calling task runs for: its SQL execution, else its RDD action's
    scope, else its stage ("driver" outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return "driver"
    for key in ("spark.sql.execution.root.id", "spark.sql.execution.id"):
        execution = context.getLocalProperty(key)
        if execution is not None:
            return f"sql:{execution}"
    scope = context.getLocalProperty("spark.rdd.scope")
    return f"rdd:{scope}" if scope else f"stage:{context.stageId()}"
