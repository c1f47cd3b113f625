"""`throttled`: a function that Spark runs on batches or rows, fed at a group's rate.

`throttle` holds rows where Spark moves them. When a job's own function makes the calls that
count (a POST per batch in ``mapInPandas``, per row in a UDF), Spark's Arrow batches and
worker buffers between `throttle` and that function gather the rows it released up again,
and the API sees them in bursts. `throttled` charges each batch as the function takes it,
so what the function sends is held to the rate whatever Spark's buffers do.

Imports PySpark, PyArrow and pandas only when called, so `import rgspark` stays light.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, TypeVar, cast

from ._client import ResourceGroupClient
from ._driver import prepare
from ._exceptions import ConfigurationError, PushbackNotRetriedError
from ._pushback import (
    PushbackCap,
    as_slow_down,
    cap_for,
    held_retry,
    retry_delay_s,
    send_with_retry,
)
from ._session import active_session
from ._spark import DEFAULT_SINK_ROWS, _check_kind, _slice_rows, _slices

if TYPE_CHECKING:
    from typing import ParamSpec  # Python 3.10: for type checkers only

    from pyspark.sql import SparkSession

    from ._quota import NamespaceQuota
    from ._stats import ThrottleStats

    P = ParamSpec("P")

__all__ = ["throttled"]

T = TypeVar("T")

# What an argument (or an item of an iterator argument) is, by its type.
_STREAM = "stream"  # an iterator: of batches (mapInPandas, mapInArrow) or of rows
_TABLE = "table"  # an Arrow RecordBatch or Table: `_slices` cuts and weighs it as it is
_FRAME = "frame"  # a pandas DataFrame
_COLUMN = "column"  # a pandas Series, an Arrow Array or ChunkedArray
_VALUE = "value"  # anything else: a row's value, a grouping key

# Learnt once per type: a row UDF's call then costs a dict lookup per argument rather than
# isinstance tests against ABCs and the classes of libraries it may not even import.
_kinds: dict[type, str] = {}


def throttled(
    func: Callable[P, T], client: ResourceGroupClient | None = None, kind: str = "publish"
) -> Callable[P, T]:
    """`func`, taking its batches or rows no faster than the namespace's group allows.

    For the functions Spark runs on the executors, where the calls that count are made::

        df.mapInPandas(throttled(post_batches, client), schema)
        df.mapInArrow(throttled(post_batches, client), schema)
        df.groupBy("k").applyInPandas(throttled(post_group, client), schema)  # (pdf) or (key, pdf)
        df.foreachPartition(throttled(post_rows, client))
        df.select(udf(throttled(post_row, client), "string")("id"))  # once per row

    Each batch is charged against `kind` (``"publish"`` or ``"dispatch"``) before `func` sees
    it, rows as msgs and bytes as bytes, and held back as long as the limits need, as
    `throttle` holds a DataFrame's rows. What the shape of a call is, is told from its
    arguments each time:

    - An iterator (``mapInPandas``, ``mapInArrow``, a grouped map's iterator form,
      ``foreachPartition``, ``rdd.mapPartitions``): `func` receives the same items, charged
      one by one as it takes them. A batch larger than about 100 ms of the allocated rate is
      cut into slices of about 100 ms, which `func` receives as separate batches. Rows
      (``foreachPartition``) are charged in chunks of as many, gathered before the first of
      them reaches `func`. `func` must handle each item as it takes it: one that reads the
      whole iterator before sending anything sends it all at once.
    - A pandas DataFrame, possibly after a key (``applyInPandas``), or pandas Series and Arrow
      arrays (a scalar pandas or Arrow UDF): these cannot be cut, so each call is charged
      whole before `func` runs. A group larger than 100 ms of the rate is sent in one go
      once paid for, though the long-run rate holds. Several columns count their rows once;
      several DataFrames (a cogroup) add up.
    - Anything else is one row (a Python UDF): each call is charged one msg.

    Bytes are Arrow bytes (a pandas batch's as PyArrow converts it, or pandas' deep memory
    usage if it cannot); rows alone carry no size, so a bytes rate does not hold them.

    Pushback: `func` may raise `rgspark.SlowDown` (or let an httpx or requests 429 or 503
    through) having sent none of the batch it was handling; after the delay it gets that
    batch again, charged once: called again with the same arguments, or, given an iterator
    of batches, with the same iterator, whose next item is that batch (so it must send each
    batch before it takes the next). Given rows or several iterators, it raises
    `rgspark.PushbackNotRetriedError`: send rows with `throttled_sink` (docs/rollout.md).

    Without a `client`, the one that the active session's ``spark.rgspark.*`` keys describe
    (`ResourceGroupClient.from_conf`). Made on the driver of a SparkSession, it checks the
    executors once, as `throttle` does, and counts what its calls charged in
    ``client.stats[kind]``. The wrapper keeps `func`'s signature and type hints (Spark reads
    them to choose the UDF's type and a grouped map's arguments) and pickles with it.
    """
    if not callable(func):
        raise TypeError(f"throttled needs a function, not {type(func).__name__}")
    if hasattr(func, "evalType") and hasattr(func, "func"):
        raise TypeError(
            "throttled wraps the Python function that Spark runs, not a UDF made of it: "
            "udf(throttled(f), ...), not throttled(udf(f, ...))"
        )
    spark = active_session()
    client = _client(client, kind, spark)
    kind = _check_kind(kind)
    stats = None if spark is None else prepare(client, kind, spark)
    return cast("Callable[P, T]", _Throttled(func, client, kind, stats))


def _client(
    client: ResourceGroupClient | None, kind: str, spark: SparkSession | None
) -> ResourceGroupClient:
    if client is None:
        _check_kind(kind)  # before the configuration: the mistake in the call comes first
        if spark is None:
            raise ConfigurationError(
                "throttled without a client reads spark.rgspark.* from the active "
                "SparkSession, and there is none: pass client="
            )
        return ResourceGroupClient.from_conf(spark)
    if not isinstance(client, ResourceGroupClient):
        raise TypeError(
            f"throttled needs a rgspark.ResourceGroupClient, not {type(client).__name__}"
        )
    return client


class _Throttled:
    """What `throttled` returns: `func`, with its name, signature and type hints, charging
    each call's batches first. Pickled by Spark into every task, where it finds the limits
    of its worker process."""

    def __init__(
        self,
        func: Callable[..., Any],
        client: ResourceGroupClient,
        kind: str,
        stats: ThrottleStats | None,
    ) -> None:
        # Name, docs and type hints, so that Spark infers the UDF's type from them (and names
        # it in plans) as it would from `func`; not `func`'s own attributes, which could
        # overwrite the ones below.
        functools.update_wrapper(self, func, updated=())
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin without one
            signature = inspect.Signature(
                [
                    inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                    inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
                ]
            )
        # Read by inspect.getfullargspec, which Spark uses to tell a grouped map's
        # ``(key, pdf)`` from ``(pdf)``, and which does not follow ``__wrapped__``.
        self.__signature__ = signature
        self.func = func
        self.client = client
        self.kind = kind
        self.stats = stats
        self._quota: NamespaceQuota | None = None
        self._cap: PushbackCap | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Limits belong to a process: each task's copy finds those of its worker.
        return {**self.__dict__, "_quota": None, "_cap": None}

    def __repr__(self) -> str:
        return f"throttled({self.func!r}, kind={self.kind!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        shape = _shape(args, kwargs)
        if shape is _STREAM:
            return self._stream(args, kwargs)
        if shape is _VALUE:
            rows = 1
            self._charge(self._task_quota(), 1, 0)
        else:
            rows = self._whole([*args, *kwargs.values()])
        # Called per batch or row: a pushed back call is made again, its batch charged once.
        quota, cap = self._task_quota(), self._pushback_cap()
        msgs = f"{self.kind}Msgs"
        result, pushbacks, slept = send_with_retry(
            lambda: self.func(*args, **kwargs),
            cap,
            lambda: quota.rate(msgs),
            held_retry(quota, self.kind, cap),
        )
        cap.sent(rows)
        if pushbacks and self.stats is not None:
            self.stats.add(0, 0, 0.0, pushbacks, slept)
        return result

    def _stream(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call `func` with its iterators fed charged; a pushback calls it again with the
        batch it took last first (`_Refeed`)."""
        feeds: list[_Refeed] = []

        def fed(value: Any) -> Any:
            if _kind(value) is not _STREAM:
                return value
            feed = _Refeed(self._feed(value))
            feeds.append(feed)
            return feed

        args = tuple(map(fed, args))
        kwargs = {name: fed(value) for name, value in kwargs.items()}
        retry = _Retry(feeds)
        while True:
            try:
                result = self.func(*args, **kwargs)
            except Exception as exc:
                if not self._again(exc, retry):
                    raise
                continue
            if isinstance(result, Iterator):  # a generator: pushbacks come as it runs
                return self._results(result, lambda: self.func(*args, **kwargs), retry)
            return result

    def _results(self, result: Any, call: Callable[[], Any], retry: _Retry) -> Iterator[Any]:
        """What a generator `func` yields, calling it again after each pushback."""
        while True:
            try:
                if result is None:
                    result = call()
                if isinstance(result, Iterator):
                    yield from result
                return
            except Exception as exc:
                if not self._again(exc, retry):
                    raise
                result = None

    def _again(self, exc: Exception, retry: _Retry) -> bool:
        """After `exc` from `func`: whether to call it again (having waited as the
        pushback asks); raises `PushbackNotRetriedError` for a pushback it cannot retry."""
        if as_slow_down(exc) is None:
            return False
        feed = retry.feed()
        if feed is None:
            raise PushbackNotRetriedError(
                f"{self.func!r} pushed back ({exc}), and rgspark cannot give it the same rows "
                "again without risking some twice or none: it was given rows rather than "
                "batches, or several iterators, or it had taken every item. Send rows with "
                "rgspark.throttled_sink, which retries the very rows pushed back."
            ) from exc
        quota, cap = self._task_quota(), self._pushback_cap()
        delay = retry_delay_s(exc, cap, lambda: quota.rate(f"{self.kind}Msgs"), retry.attempt())
        if delay:
            held_retry(quota, self.kind, cap)(delay)
        if self.stats is not None:
            self.stats.add(0, 0, 0.0, 1, delay or 0.0)
        feed.rewind()
        return True

    def _pushback_cap(self) -> PushbackCap:
        cap = self._cap
        if cap is None:
            cap = self._cap = cap_for(self.client.url, self.kind, self._task_quota())
        return cap

    def _task_quota(self) -> NamespaceQuota:
        """The worker's limits, announced once per task (each task unpickles its own copy)
        rather than at every call of a row UDF."""
        quota = self._quota
        if quota is None:
            quota = self._quota = self.client.quota(self.kind)
        return quota

    def _charge(self, quota: NamespaceQuota, rows: int, nbytes: int) -> None:
        # The pushback cap first, apart from the group's limits: its wait is not demand
        # held back by the group, and the group's buckets refill meanwhile.
        cap = self._pushback_cap()
        cap_s = cap.wait_s(rows, quota.rate(f"{self.kind}Msgs"))
        if cap_s > 0:
            cap.sleep(cap_s)
        waited = quota.acquire(self.kind, rows, nbytes)
        if self.stats is not None:
            self.stats.add(rows, nbytes, waited, 0, cap_s)

    def _whole(self, values: list[Any]) -> int:
        """Charge a call's batches whole: columns are the same rows, frames add up."""
        batches = [batch for batch in map(_batch, values) if batch is not None]
        counts = [batch.num_rows for batch in batches]
        columns = any(_kind(value) is _COLUMN for value in values)
        rows = (max(counts) if columns else sum(counts)) if counts else 0
        nbytes = sum(int(batch.nbytes) for batch in batches)
        if rows or nbytes:
            self._charge(self._task_quota(), rows, nbytes)
        return rows

    def _feed(self, items: Iterator[Any]) -> Iterator[Any]:
        """`items` as `func` takes them, each charged first."""
        quota = self.client.quota(self.kind)  # announced at each partition, as `throttle` does
        try:
            yield from self._charged(quota, items)
        finally:
            if self.stats is not None:
                self.stats.flush()  # the task's figures, before it ends

    def _charged(self, quota: NamespaceQuota, items: Iterator[Any]) -> Iterator[Any]:
        """The first item tells batches (cut into slices) from rows (gathered into chunks)."""
        first = next(items, _END)
        if first is _END:
            return
        rest = itertools.chain((first,), items)
        if _batch(first) is None:
            yield from self._rows(quota, rest)
            return
        cap = self._pushback_cap()
        taken = 0  # rows of the piece `func` took last: sent once it takes the next
        for item in rest:
            batch = _batch(item)
            pieces = [(1, 0, item)] if batch is None else _pieces(batch, quota, self.kind)
            for rows, nbytes, piece in pieces:  # (a stray row among batches: one msg)
                if taken:
                    cap.sent(taken)
                self._charge(quota, rows, nbytes)
                taken = rows
                yield piece
        if taken:
            cap.sent(taken)

    def _rows(self, quota: NamespaceQuota, rows: Iterator[Any]) -> Iterator[Any]:
        """Rows in chunks of about 100 ms of the rate in force, each charged before its
        first row goes on."""
        while True:
            size = _slice_rows(quota, self.kind, 0.0) or DEFAULT_SINK_ROWS
            chunk = list(itertools.islice(rows, size))
            if not chunk:
                return
            self._charge(quota, len(chunk), 0)
            yield from chunk


_END = object()


def _pieces(batch: Any, quota: NamespaceQuota, kind: str) -> Iterator[tuple[int, int, Any]]:
    """(rows, bytes, piece) of each slice of `batch`, as `func` receives it."""
    for piece in _slices(batch, quota, kind):
        yield piece.num_rows, piece.nbytes, piece.value if isinstance(piece, _Part) else piece


class _Refeed(Iterator[Any]):
    """An iterator's items as `func` takes them; after `rewind`, the item it took last
    comes again first (not charged again: the items come from `_Throttled._feed`)."""

    __slots__ = ("_again", "_items", "ended", "last", "taken")

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._again = False
        self.ended = False  # `func` was told there are no more items
        self.last: Any = _END
        self.taken = 0  # items taken, not counting those given again

    def __next__(self) -> Any:
        if self._again:
            self._again = False
            return self.last
        try:
            item = next(self._items)
        except StopIteration:
            self.ended = True
            raise
        self.last = item
        self.taken += 1
        return item

    def refeedable(self) -> bool:
        """Whether `func` can be given the item it took last again without sending
        anything twice: a batch (handled before the next is taken), or nothing yet."""
        return not self.ended and (self.last is _END or _batch(self.last) is not None)

    def rewind(self) -> None:
        self._again = self.last is not _END


class _Retry:
    """The pushbacks of one call of a function given an iterator: its retries of one
    batch count as one overload, each new batch pushed back as another."""

    __slots__ = ("_attempt", "_feeds", "_mark")

    def __init__(self, feeds: list[_Refeed]) -> None:
        self._feeds = feeds
        self._attempt = 0
        self._mark = -1

    def feed(self) -> _Refeed | None:
        """The iterator to give again; None when no retry can be sound."""
        if len(self._feeds) != 1 or not self._feeds[0].refeedable():
            return None
        return self._feeds[0]

    def attempt(self) -> int:
        """This retry's number for the batch pushed back (0: its first)."""
        taken = self._feeds[0].taken
        if taken != self._mark:
            self._mark, self._attempt = taken, 0
        attempt = self._attempt
        self._attempt += 1
        return attempt


class _Part:
    """A batch that is not an Arrow RecordBatch or Table, as `_slices` cuts one (by
    `num_rows`, `nbytes` and `slice`): a pandas DataFrame or Series, an Arrow array, or a
    tuple of columns (an item of a scalar iterator UDF of several columns). Its bytes are
    weighed once and shared out among its slices by rows."""

    __slots__ = ("nbytes", "num_rows", "value")

    def __init__(self, value: Any, num_rows: int, nbytes: int) -> None:
        self.value = value
        self.num_rows = num_rows
        self.nbytes = nbytes

    def slice(self, offset: int, length: int) -> _Part:
        end = min(offset + length, self.num_rows)

        def share(at: int) -> int:  # cumulative, so that the slices' bytes add up exactly
            return round(self.nbytes * at / self.num_rows)

        return _Part(_cut(self.value, offset, end), end - offset, share(end) - share(offset))


def _shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """`_STREAM` if some argument is an iterator, else `_FRAME` if some is a batch, else
    `_VALUE`: scalar arguments of a row."""
    shape = _VALUE
    for value in itertools.chain(args, kwargs.values()) if kwargs else args:
        kind = _kind(value)
        if kind is _STREAM:
            return _STREAM
        if kind is not _VALUE:
            shape = _FRAME
    return shape


def _kind(value: Any) -> str:
    cls = type(value)
    kind = _kinds.get(cls)
    if kind is None:
        kind = _kinds[cls] = _kind_of_type(cls)
    return kind


def _kind_of_type(cls: type) -> str:
    # A library's classes exist only once it is imported: a type of one not imported is none
    # of its classes.
    pandas = sys.modules.get("pandas")
    arrow = sys.modules.get("pyarrow")
    if arrow is not None and issubclass(cls, (arrow.RecordBatch, arrow.Table)):
        return _TABLE
    if pandas is not None and issubclass(cls, pandas.DataFrame):
        return _FRAME
    if pandas is not None and issubclass(cls, pandas.Series):
        return _COLUMN
    if arrow is not None and issubclass(cls, (arrow.Array, arrow.ChunkedArray)):
        return _COLUMN
    if issubclass(cls, Iterator):
        return _STREAM
    return _VALUE


def _batch(value: Any) -> Any:
    """`value` as `_slices` cuts it (a RecordBatch or Table itself, else a `_Part`); None
    when it is a row."""
    kind = _kind(value)
    if kind is _TABLE:
        return value
    if kind is _FRAME or kind is _COLUMN:
        return _Part(value, len(value), _nbytes(value))
    if type(value) is tuple and value and all(_kind(column) is _COLUMN for column in value):
        return _Part(value, len(value[0]), sum(_nbytes(column) for column in value))
    return None


def _nbytes(value: Any) -> int:
    """A pandas object's Arrow bytes (what `throttle` would have counted for it), else its
    deep memory usage (a column PyArrow cannot convert); an Arrow array's bytes."""
    import pyarrow as pa

    if not hasattr(value, "iloc"):
        return int(value.nbytes)
    frame = hasattr(value, "columns")
    try:
        if frame:
            return int(pa.Table.from_pandas(value, preserve_index=False).nbytes)
        return int(pa.Array.from_pandas(value).nbytes)
    except (pa.ArrowException, TypeError, ValueError):
        usage = value.memory_usage(index=False, deep=True)
        return int(usage.sum() if frame else usage)


def _cut(value: Any, start: int, end: int) -> Any:
    if isinstance(value, tuple):
        return tuple(_cut(column, start, end) for column in value)
    if hasattr(value, "iloc"):
        return value.iloc[start:end]
    return value.slice(start, end - start)
