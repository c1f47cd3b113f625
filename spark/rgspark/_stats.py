"""What went through the Spark helpers: running totals, and the figures of each action.

Tasks add what they charged to a Spark accumulator, under the action that ran them: a
DataFrame action's SQL execution (a streaming query's micro-batch is one), or else the RDD
action's operation scope. The driver merges what tasks send as they finish, so an action's
figures are complete once it has returned.

A Spark Connect session has no accumulators: its stats count nothing, and reading their figures
raises `FiguresNotCountedError` rather than showing zeros.

Imports nothing of PySpark, so `import rgspark` stays light.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

from ._exceptions import FiguresNotCountedError

if TYPE_CHECKING:
    from pyspark import Accumulator, SparkContext
    from pyspark.accumulators import AccumulatorParam

    _Param = AccumulatorParam["Figures"]
else:
    _Param = object

__all__ = ["ActionStats", "ThrottleStats"]

# Actions whose figures the driver keeps; the totals count every one.
KEPT_ACTIONS = 16
NOT_COUNTED = (
    "The figures of a Spark Connect session are not counted by rgspark yet: the group's usage "
    "is in `rgadmin top` and the usage history (/admin/v2/resourcegroups/GROUP/usage)"
)


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


class ThrottleStats:
    """What went through one kind of traffic (driver-side): running totals over every action
    since it was made, and `last`, the figures of the last action.

    ``client.stats["publish"]`` is made by the first helper that runs for the client (`throttle`,
    `throttled_sink`); pass one to `throttled_sink` as ``stats=`` to count apart. The figures are
    complete once an action has returned.

    Made with `context` None (as the helpers make them for a Spark Connect session, which has no
    SparkContext), it counts nothing, and reading a figure raises `FiguresNotCountedError`.
    """

    __slots__ = ("_figures", "kind")

    def __init__(self, context: SparkContext | None, kind: str) -> None:
        self.kind = kind
        self._figures: Accumulator[Figures] | None = (
            None if context is None else context.accumulator(Figures(), FiguresParam())
        )

    @property
    def counted(self) -> bool:
        """Whether the figures are counted: False for a Spark Connect session's."""
        return self._figures is not None

    def add(self, rows: int, nbytes: int, waited_s: float) -> None:
        """Count a slice a task sent, that waited `waited_s` before it was released."""
        if self._figures is not None:
            now = time.time()
            self._figures.add(Figures.of(_action(), rows, nbytes, waited_s, now - waited_s, now))

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
    def last(self) -> ActionStats | None:
        """The last action's figures (the one that started last); None before any."""
        actions = self._value().actions
        if not actions:
            return None
        rows, nbytes, held_s, start, end = max(actions.values(), key=lambda entry: entry[3])
        return ActionStats(int(rows), int(nbytes), end - start, held_s)

    def _value(self) -> Figures:
        if self._figures is None:
            raise FiguresNotCountedError(NOT_COUNTED)
        return self._figures.value

    def __repr__(self) -> str:
        if self._figures is None:
            return f"ThrottleStats(kind={self.kind!r}, not counted: a Spark Connect session)"
        return (
            f"ThrottleStats(kind={self.kind!r}, rows={self.rows}, bytes={self.bytes}, "
            f"task_throttled_s={self.task_throttled_s:.3f}, last={self.last})"
        )


class Figures:
    """The accumulator's value: totals, and per action [rows, bytes, held_s, start, end]
    (start and end in seconds since the epoch)."""

    __slots__ = ("actions", "bytes", "held_s", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0
        self.held_s = 0.0
        self.actions: dict[str, list[float]] = {}

    @classmethod
    def of(
        cls, action: str, rows: int, nbytes: int, held_s: float, start: float, end: float
    ) -> Figures:
        figures = cls()
        figures.rows, figures.bytes, figures.held_s = rows, nbytes, held_s
        figures.actions[action] = [rows, nbytes, held_s, start, end]
        return figures

    def merge(self, other: Figures) -> Figures:
        self.rows += other.rows
        self.bytes += other.bytes
        self.held_s += other.held_s
        for action, (rows, nbytes, held_s, start, end) in other.actions.items():
            entry = self.actions.get(action)
            if entry is None:
                self.actions[action] = [rows, nbytes, held_s, start, end]
            else:
                entry[0] += rows
                entry[1] += nbytes
                entry[2] += held_s
                entry[3] = min(entry[3], start)
                entry[4] = max(entry[4], end)
        if len(self.actions) > KEPT_ACTIONS:  # on the driver: forget the oldest
            oldest = sorted(self.actions, key=lambda action: self.actions[action][3])
            for action in oldest[: len(self.actions) - KEPT_ACTIONS]:
                del self.actions[action]
        return self


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
