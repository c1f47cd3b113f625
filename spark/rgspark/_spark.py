"""`throttle` and the sink helper: a group's rate applied to Spark jobs.

Imports PySpark and PyArrow only when called, so `import rgspark` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Callable

from ._client import ResourceGroupClient
from ._driver import prepare
from ._exceptions import ConfigurationError
from ._pushback import PushbackCap, cap_for, held_retry, send_with_retry
from ._quota import NamespaceQuota
from ._session import active_session
from ._stats import ThrottleStats
from .wire import BURST_S, KINDS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["throttle", "throttled_sink"]

# Unlimited or not, a sink sends at most this many rows between two charges.
DEFAULT_SINK_ROWS = 1000


def throttle(
    df: DataFrame, client: ResourceGroupClient | None = None, kind: str | None = None
) -> DataFrame:
    """The same rows and schema, flowing no faster than the namespace's group allows.

    Rows count as msgs and Arrow bytes as bytes, against ``kind`` (``"publish"`` or
    ``"dispatch"``). Batches are cut so that no slice exceeds about 100 ms of the allocated
    rate, then each slice is charged and held back as long as the limits need. Works on
    batch and streaming DataFrames. `stats` on the driver tells what went through.

    Without a `client`, the one that the session's ``spark.rgspark.*`` keys describe
    (`ResourceGroupClient.from_conf`): ``throttle(df, kind="publish")``.

    The first call for a client in a Spark application checks the executors (a tiny job:
    see `ResourceGroupClient.check`), so that a setup that cannot work fails here, in one
    line, before any data moves.
    """
    from pyspark.sql import DataFrame as SparkDataFrame

    if not isinstance(df, SparkDataFrame):
        raise TypeError(f"throttle needs a pyspark.sql.DataFrame, not {type(df).__name__}")
    if client is None:
        _check_kind(kind)
        client = ResourceGroupClient.from_conf(df.sparkSession)
    elif not isinstance(client, ResourceGroupClient):
        raise TypeError(
            f"throttle needs a rgspark.ResourceGroupClient, not {type(client).__name__}"
        )
    kind = _check_kind(kind)
    stats = prepare(client, kind, df.sparkSession)

    def limit(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        quota = client.quota(kind)
        try:
            for batch in batches:
                for piece in _slices(batch, quota, kind):
                    waited = quota.acquire(kind, piece.num_rows, piece.nbytes)
                    stats.add(piece.num_rows, piece.nbytes, waited)
                    yield piece
        finally:
            stats.flush()  # the task's figures, before it ends

    return df.mapInArrow(limit, df.schema)


def throttled_sink(
    client: ResourceGroupClient,
    kind: str,
    send: Callable[[list[Any]], object],
    *,
    size: Callable[[Any], int] | None = None,
    stats: ThrottleStats | None = None,
) -> Callable[[Iterable[Any]], None]:
    """A function for ``foreachPartition`` that sends rows with `send` at the group's rate.

    `send` gets a list of rows at a time (at most about 100 ms of the allocated rate: of its
    msgs rate, and of its bytes rate when `size`, a row's size in bytes, is given; a single
    larger row goes alone); after it returns, the rows are charged as msgs, and as bytes
    when `size` is given, and the next call waits as long as the limits need. For
    ``foreachBatch``, call ``batch_df.foreachPartition(throttled_sink(...))``.

    Made on the driver of a SparkSession (classic or Connect), it checks the executors as
    `throttle` does, and counts in ``client.stats[kind]`` unless given other `stats`.

    Pushback: `send` may raise `rgspark.SlowDown` (or let an httpx or requests 429 or 503
    through) when none of its rows was sent: the same list is sent again after the delay
    (``after_s``, ``Retry-After``, or a backoff), its rows charged once, and the worker
    lowers its rate below its allocation while the destination pushes back, without
    counting those waits as held back (`rgspark._pushback`; docs/rollout.md).
    """
    kind = _check_kind(kind)
    spark = active_session()
    if spark is not None:
        counted = prepare(client, kind, spark)
        stats = counted if stats is None else stats

    def run(rows: Iterable[Any]) -> None:
        quota = client.quota(kind)
        cap = cap_for(client.url, kind, quota)
        chunk: list[Any] = []
        nbytes = 0
        max_rows, max_bytes = _sink_limits(quota, kind, size is not None, cap)

        def flush() -> None:
            nonlocal chunk, nbytes, max_rows, max_bytes
            _send(quota, kind, send, stats, chunk, nbytes, cap)
            chunk, nbytes = [], 0
            max_rows, max_bytes = _sink_limits(quota, kind, size is not None, cap)

        try:
            for row in rows:
                row_bytes = size(row) if size is not None else 0
                if chunk and nbytes + row_bytes > max_bytes:  # would overdraw the chunk
                    flush()
                chunk.append(row)
                nbytes += row_bytes
                if len(chunk) >= max_rows or nbytes >= max_bytes:
                    flush()
            if chunk:
                flush()
        finally:
            if stats is not None:
                stats.flush()  # the task's figures, before it ends

    return run


def _send(
    quota: NamespaceQuota,
    kind: str,
    send: Callable[[list[Any]], object],
    stats: ThrottleStats | None,
    chunk: list[Any],
    nbytes: int,
    cap: PushbackCap,
) -> None:
    """Send `chunk` until the destination takes it, then wait at the pushback cap (its own
    wait, which the group's demand estimators never see) and charge the group's limits."""
    msgs = f"{kind}Msgs"
    _, pushbacks, retry_s = send_with_retry(
        lambda: send(chunk), cap, lambda: quota.rate(msgs), held_retry(quota, kind, cap)
    )
    cap_s = cap.waited_s(len(chunk), quota.rate(msgs))
    if cap_s > 0:
        cap.sleep(cap_s)
    waited = _charge(quota, kind, len(chunk), nbytes)
    if stats is not None:
        stats.add(len(chunk), nbytes, waited, pushbacks, retry_s + cap_s)


def _charge(quota: NamespaceQuota, kind: str, rows: int, nbytes: int) -> float:
    """Charge a chunk sent in pieces of about `BURST_S` of the rates in force as each is
    charged; returns the seconds waited.

    A chunk is cut to the rate when it is gathered, but a retry's delay may come before it
    is charged, and the worker's allocation may fall meanwhile (its share goes to others
    while it waits): charged whole at the fallen rate, the chunk would be held, and counted
    as held back, for as long as the whole chunk takes at that rate, though a risen
    allocation releases it sooner. Piece by piece, each is held only as long as the rate
    in force then needs."""
    waited = 0.0
    row_bytes = nbytes / rows if rows else 0.0
    done = 0
    while done < rows:
        step = min(rows - done, _slice_rows(quota, kind, row_bytes) or rows)
        share = round(nbytes * (done + step) / rows) - round(nbytes * done / rows)
        waited += quota.acquire(kind, step, share)
        done += step
    return waited


def _sink_limits(
    quota: NamespaceQuota, kind: str, sized: bool, cap: PushbackCap | None = None
) -> tuple[int, float]:
    """The most rows, and bytes, a sink sends between two charges: about `BURST_S` of the
    rates in force (bytes only when rows are sized; rows half as many while a pushback cap
    is kept, holding or not), `DEFAULT_SINK_ROWS` when unlimited."""
    rows = _slice_rows(quota, kind, 0.0) or DEFAULT_SINK_ROWS
    capped = None if cap is None else cap.rate(None)
    if capped is not None:
        # Half as much: a destination that counts over a window sees the rate of chunks of
        # c rows as up to c more than it is, which pushes back earlier.
        rows = max(1, min(rows // 2, math.floor(capped * BURST_S / 2)))
    rate = quota.rate(f"{kind}Bytes") if sized else None
    return rows, math.inf if rate is None else max(1.0, rate * BURST_S)


def _slices(batch: pa.RecordBatch, quota: NamespaceQuota, kind: str) -> Iterator[pa.RecordBatch]:
    """Cut a batch into slices of about `BURST_S` of the rate in force when each is cut.

    Reads only `num_rows`, `nbytes` and ``slice(offset, length)``: an Arrow RecordBatch or
    Table, or `rgspark._throttled`'s wrapper of a pandas batch."""
    rows = batch.num_rows
    row_bytes = batch.nbytes / rows if rows else 0.0
    offset = 0
    while offset < rows:
        step = _slice_rows(quota, kind, row_bytes) or rows
        if offset == 0 and step >= rows:
            yield batch
            return
        yield batch.slice(offset, step)
        offset += step


def _slice_rows(quota: NamespaceQuota, kind: str, row_bytes: float) -> int:
    """Rows worth about `BURST_S` of the allocated rates; 0 when neither is limited."""
    limits = []
    msgs = quota.rate(f"{kind}Msgs")
    if msgs is not None:
        limits.append(msgs * BURST_S)
    nbytes = quota.rate(f"{kind}Bytes")
    if nbytes is not None and row_bytes > 0:
        limits.append(nbytes * BURST_S / row_bytes)
    return max(1, math.floor(min(limits))) if limits else 0


def _check_kind(kind: str | None) -> str:
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be 'publish' or 'dispatch', not {kind!r}")
    return kind
