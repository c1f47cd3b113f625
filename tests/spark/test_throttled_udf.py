"""`throttled`: the user's own function, fed at the group's rate, whatever shape Spark calls
it with.

The jobs post their rows to a real HTTP endpoint run by the test, which notes when each POST
arrives and how many rows it carries: the rate is timed where the side effect happens, after
every buffer of Spark's. The slicing and charging are also run on fake time, without Spark.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
import typing
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd
import pytest

import rgspark
from rgspark import ConfigurationError, throttled
from rgspark._quota import NamespaceQuota
from tests.spark.test_throttle_spark import (
    LocalClient,
    arrow_bytes,
    bounded,
    fake_buckets,  # noqa: F401 (a fixture, taken by `local`)
    run,
    spark_job,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from tests.spark.conftest import FakeMonotonicClock, RGServer

logger = logging.getLogger(__name__)

FLOW_S = 5  # seconds of rows a timed job sends, at the group's rate
# No one-second window holds more than the group's rate and this: the rows leave in slices of
# about 100 ms of each worker's rate, each once paid for, so a second's releases hold at most
# a second's worth and the slices a worker's bucket holds (100 ms: 10%); a POST's delay, which
# moves a slice released before a window into it, adds up to 50 ms of the rate.
BURST_REL = 0.15
# Nor less than the rate by this, second after second. Generous: a worker starved of CPU for
# a moment on this shared machine catches up by one slice at most, and the tasks' shares add
# up to the group's rate only within three report intervals of a task's start (measured on
# this machine under load: 70% at worst, in the second after the last task started).
SHORT_REL = 0.35


# ---------------------------------------------------------------------------------------------
# A real endpoint


class Arrival(NamedTuple):
    at: float  # monotonic seconds
    rows: int
    connection: int  # the client's port: each task posts over a connection of its own


class Endpoint:
    """An HTTP server on 127.0.0.1 noting each POST of a JSON list of rows as it arrives."""

    def __init__(self) -> None:
        arrivals: list[Arrival] = []
        self.arrivals = arrivals

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a connection per task, not per POST

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                rows = len(json.loads(body))
                arrivals.append(Arrival(time.monotonic(), rows, self.client_address[1]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rows"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def rows(self) -> int:
        return sum(arrival.rows for arrival in self.arrivals)

    def span(self) -> tuple[float, float, float]:
        """When every task had posted (before, a task starting late leaves its share to the
        others only once the server hands it out), when the first task to finish posted
        last (likewise), and when the last POST came."""
        firsts: dict[int, float] = {}
        lasts: dict[int, float] = {}
        for arrival in self.arrivals:
            firsts[arrival.connection] = min(arrival.at, firsts.get(arrival.connection, arrival.at))
            lasts[arrival.connection] = max(arrival.at, lasts.get(arrival.connection, arrival.at))
        return max(firsts.values()), min(lasts.values()), max(lasts.values())

    def windows(self, step_s: float) -> list[int]:
        """Rows that arrived in each one-second window after the first second of every task
        posting, until the first ended, the windows starting `step_s` apart."""
        first, end, _ = self.span()
        counts = []
        start = first + 1.0
        while start + 1.0 <= end:
            counts.append(sum(a.rows for a in self.arrivals if start <= a.at < start + 1.0))
            start += step_s
        return counts

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    yield server
    server.close()


# ---------------------------------------------------------------------------------------------
# The shapes: each runs `df` (a column `id`) through the user's function, which posts its rows
# to `url`, wrapped in `throttled`. Whatever runs in the workers is defined inside a function,
# so that cloudpickle ships it by value.


def map_in_pandas(df: DataFrame, client: rgspark.ResourceGroupClient, url: str) -> None:
    def post(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import httpx

        with httpx.Client(trust_env=False) as http:
            for pdf in batches:
                http.post(url, json=pdf["id"].tolist())
                yield pdf

    run(df.mapInPandas(throttled(post, client), df.schema))


def map_in_arrow(df: DataFrame, client: rgspark.ResourceGroupClient, url: str) -> None:
    def post(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import httpx

        with httpx.Client(trust_env=False) as http:
            for batch in batches:
                http.post(url, json=batch.column("id").to_pylist())
                yield batch

    run(df.mapInArrow(throttled(post, client), df.schema))


def apply_in_pandas(df: DataFrame, client: rgspark.ResourceGroupClient, url: str) -> None:
    clients: dict[str, Any] = {}  # one HTTP client per task: each unpickles its own

    def post(key: tuple[Any, ...], pdf: pd.DataFrame) -> pd.DataFrame:
        import httpx

        http = clients.get("http") or clients.setdefault("http", httpx.Client(trust_env=False))
        http.post(url, json=pdf["id"].tolist())
        return pdf.iloc[:0]

    # Groups of 20 rows: 40 ms of the rate each.
    groups = df.selectExpr("id", "id DIV 20 AS g")
    run(groups.groupBy("g").applyInPandas(throttled(post, client), groups.schema))


def foreach_partition(df: DataFrame, client: rgspark.ResourceGroupClient, url: str) -> None:
    def post(rows: Iterator[Any]) -> None:
        import httpx

        with httpx.Client(trust_env=False) as http:
            chunk: list[int] = []
            for row in rows:
                chunk.append(row.id)
                if len(chunk) == 10:  # ten rows a request
                    http.post(url, json=chunk)
                    chunk = []
            if chunk:
                http.post(url, json=chunk)

    bounded(df.sparkSession, lambda: df.foreachPartition(throttled(post, client)))


def python_udf(df: DataFrame, client: rgspark.ResourceGroupClient, url: str) -> None:
    from pyspark.sql.functions import udf

    clients: dict[str, Any] = {}

    # Without type hints: from those of a plain function, PySpark 4 tries to infer a pandas
    # UDF, and warns when it cannot.
    def post(row_id):  # type: ignore[no-untyped-def]
        import httpx

        http = clients.get("http") or clients.setdefault("http", httpx.Client(trust_env=False))
        http.post(url, json=[row_id])  # a request per row
        return row_id

    run(df.select(udf(throttled(post, client), "long")("id").alias("id")))


Send = Callable[["DataFrame", rgspark.ResourceGroupClient, str], None]
# Each shape and the group's rate (msgs/s) it runs at: a request per row, and a pandas
# DataFrame per group, cost the machine more than the others at the same rate.
SHAPES: dict[str, tuple[Send, int]] = {
    "mapInPandas": (map_in_pandas, 1000),
    "mapInArrow": (map_in_arrow, 1000),
    "applyInPandas": (apply_in_pandas, 500),
    "foreachPartition": (foreach_partition, 1000),
    "python_udf": (python_udf, 250),
}


@spark_job
@pytest.mark.parametrize("shape", SHAPES)
def test_what_the_function_sends_arrives_at_the_groups_rate(
    spark: SparkSession, rg_server: RGServer, endpoint: Endpoint, shape: str
) -> None:
    send, rate = SHAPES[shape]
    rows = FLOW_S * rate
    # A group of its own: lowering a group's rate leaves the tasks short for a while, as the
    # server waits for their reports before it hands out their new shares.
    namespace = rg_server.namespace(publishRateInMsgs=rate)
    # Workers started, with the namespace's limits in them, before the timed job; with a
    # client of its own, so that the timed job's counts only the timed job.
    send(spark.range(rate // 5, numPartitions=2), namespace.client(), endpoint.url)
    endpoint.arrivals.clear()
    client = namespace.client()

    send(spark.range(rows, numPartitions=2), client, endpoint.url)

    assert endpoint.rows == rows
    stats = client.stats["publish"]
    assert stats.rows == rows  # what went through is what the endpoint received
    assert stats.task_throttled_s > 0
    seconds, sliding = endpoint.windows(1.0), endpoint.windows(0.05)
    first, end, last = endpoint.span()
    start = min(arrival.at for arrival in endpoint.arrivals)
    logger.info(
        "%s at %d/s: seconds %s, windows every 50 ms %+.1f%% to %+.1f%% of the rate, "
        "while all tasks posted (%.1f s to %.1f s of %.1f s)",
        shape,
        rate,
        seconds,
        100 * (min(sliding) / rate - 1),
        100 * (max(sliding) / rate - 1),
        first - start,
        end - start,
        last - start,
    )
    assert len(seconds) >= FLOW_S - 3, f"the tasks posted together for {end - first:.1f} s"
    # No window more than a slice above the rate (what protects the endpoint), and no second
    # far below it.
    assert max(sliding) <= (1 + BURST_REL) * rate, seconds
    # Every second after the first (the first may end before the shares have moved).
    assert min(seconds[1:]) >= (1 - SHORT_REL) * rate, seconds


@spark_job
def test_stats_count_arrow_bytes_of_what_went_through(
    spark: SparkSession, rg_server: RGServer, endpoint: Endpoint
) -> None:
    job = rg_server.namespace()  # unlimited: nothing waits
    df = spark.range(3000, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS s")
    client = job.client()

    map_in_arrow(df, client, endpoint.url)

    stats = client.stats["publish"]
    assert (stats.rows, endpoint.rows) == (3000, 3000)
    assert stats.bytes == arrow_bytes(df) > 0
    assert stats.task_throttled_s == 0.0


@spark_job
def test_throttled_reads_the_client_from_the_sessions_conf_and_shares_its_stats(
    spark: SparkSession, rg_server: RGServer, endpoint: Endpoint
) -> None:
    job = rg_server.namespace()
    keys = {"url": rg_server.url, "tenant": job.tenant, "namespace": job.namespace}
    keys["token"] = job.token
    for key, value in keys.items():
        spark.conf.set(f"spark.rgspark.{key}", value)
    try:
        client = rgspark.ResourceGroupClient.from_conf(spark)
        df = spark.range(500, numPartitions=2)
        run(rgspark.throttle(df, kind="dispatch"))
        count = throttled(lambda rows: sum(1 for _ in rows), kind="dispatch")
        bounded(spark, lambda: df.foreachPartition(count))
    finally:
        for key in keys:
            spark.conf.unset(f"spark.rgspark.{key}")

    # `throttle` and `throttled` count in the same figures.
    assert client.stats["dispatch"].rows == 1000


# ---------------------------------------------------------------------------------------------
# Mistakes caught on the driver, at wrap time


def test_bad_arguments_raise_when_wrapping(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import LongType

    monkeypatch.setattr("rgspark._throttled.active_session", lambda: None)
    client = LocalClient(NamespaceQuota("t", "ns"))

    with pytest.raises(TypeError, match="throttled needs a function, not int"):
        throttled(3, client)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="kind must be 'publish' or 'dispatch'"):
        throttled(len, client, "consume")
    with pytest.raises(TypeError, match="ResourceGroupClient, not str"):
        throttled(len, "http://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"udf\(throttled\(f\), \.\.\.\), not"):
        throttled(udf(lambda x: x, LongType()), client)
    with pytest.raises(ConfigurationError, match="there is none: pass client="):
        throttled(len)
    assert client.stats == {}


# ---------------------------------------------------------------------------------------------
# Slicing and charging, on fake time


class Local(typing.Protocol):
    def __call__(self, rates: dict[str, float], cls: type[LocalClient] = ..., /) -> LocalClient: ...


@pytest.fixture
def local(
    monkeypatch: pytest.MonkeyPatch,
    fake_buckets: FakeMonotonicClock,  # noqa: F811 (the fixture imported above)
) -> Local:
    """Clients whose limits are given and run on fake time, with no session to check."""
    monkeypatch.setattr("rgspark._throttled.active_session", lambda: None)

    def make(rates: dict[str, float], cls: type[LocalClient] = LocalClient) -> LocalClient:
        quota = NamespaceQuota("t", "ns", sleep=fake_buckets.sleep)
        quota.apply(rates)
        return cls(quota)

    return make


class Taken:
    """What the user's function took: (fake seconds since the start, rows), in order."""

    def __init__(self, clock: FakeMonotonicClock) -> None:
        self.clock = clock
        self.start = clock()
        self.calls: list[tuple[float, int]] = []

    def note(self, rows: int) -> None:
        self.calls.append((round((self.clock() - self.start) / 1e9, 6), rows))


def test_arrow_batches_reach_the_function_in_100_ms_slices_each_paid_first(
    local: Local, clock: FakeMonotonicClock
) -> None:
    import pyarrow as pa

    taken = Taken(clock)

    def post(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            taken.note(batch.num_rows)
            yield batch

    batches = [pa.record_batch({"id": list(range(n))}) for n in (500, 100)]
    out = list(throttled(post, local({"publishMsgs": 2000}))(iter(batches)))

    # 200 rows (100 ms at 2000 msgs/s) a slice, each taken once paid for.
    assert taken.calls == [(0.1, 200), (0.2, 200), (0.25, 100), (0.3, 100)]
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(batches))


def test_pandas_batches_are_cut_by_their_arrow_bytes_under_a_bytes_rate(
    local: Local, clock: FakeMonotonicClock
) -> None:
    taken = Taken(clock)

    def post(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            taken.note(len(pdf))
            yield pdf

    pdf = pd.DataFrame({"id": range(100)})  # 800 Arrow bytes
    out = list(throttled(post, local({"publishBytes": 2000}))(iter([pdf])))

    # 200 bytes a slice: 25 rows of 8 bytes, each paid for before it is taken.
    assert taken.calls == [(0.1, 25), (0.2, 25), (0.3, 25), (0.4, 25)]
    pd.testing.assert_frame_equal(pd.concat(out), pdf)


def test_rows_are_charged_in_chunks_of_100_ms_before_the_first_of_each_goes_on(
    local: Local, clock: FakeMonotonicClock
) -> None:
    from pyspark.sql import Row

    taken = Taken(clock)
    seen: list[int] = []

    def post(rows: Iterator[Row]) -> None:
        for row in rows:
            seen.append(row.id)
            if row.id % 200 == 0 or row.id == 449:
                taken.note(row.id)

    assert throttled(post, local({"publishMsgs": 2000}))(Row(id=i) for i in range(450)) is None

    assert seen == list(range(450))
    assert taken.calls == [(0.1, 0), (0.2, 200), (0.225, 400), (0.225, 449)]


def test_unlimited_rows_go_on_at_once(local: Local, clock: FakeMonotonicClock) -> None:
    start = clock()
    assert throttled(sum, local({}))(iter(range(2500))) == sum(range(2500))
    assert clock() == start


def test_a_group_is_charged_whole_before_the_function_runs(
    local: Local, clock: FakeMonotonicClock
) -> None:
    taken = Taken(clock)

    def with_key(key: tuple[int], pdf: pd.DataFrame) -> pd.DataFrame:
        taken.note(len(pdf))
        return pdf.assign(key=key[0])

    def without_key(pdf: pd.DataFrame) -> pd.DataFrame:
        taken.note(len(pdf))
        return pdf

    client = local({"publishMsgs": 2000})
    keyed, plain = throttled(with_key, client), throttled(without_key, client)
    pdf = pd.DataFrame({"id": range(500)})

    assert keyed((7,), pdf)["key"].tolist() == [7] * 500
    assert plain(pdf) is pdf
    # Not cut: 500 rows, a quarter of a second, paid whole.
    assert taken.calls == [(0.25, 500), (0.5, 500)]
    # Spark counts a grouped map's arguments to know whether to pass the key.
    assert inspect.getfullargspec(keyed).args == ["key", "pdf"]
    assert inspect.getfullargspec(plain).args == ["pdf"]


def test_the_columns_of_a_scalar_pandas_udf_count_their_rows_once(
    local: Local, clock: FakeMonotonicClock
) -> None:
    def add(a: pd.Series, b: pd.Series) -> pd.Series:
        return a + b

    wrapped = throttled(add, local({"publishMsgs": 1000}))
    start = clock()
    assert wrapped(pd.Series(range(100)), pd.Series(range(100))).tolist() == list(range(0, 200, 2))
    assert (clock() - start) / 1e9 == pytest.approx(0.1)
    # Spark infers a pandas UDF's type from the hints, through the wrapper as from `add`.
    assert typing.get_type_hints(wrapped) == typing.get_type_hints(add)


def test_a_row_udf_is_charged_a_msg_per_call(local: Local, clock: FakeMonotonicClock) -> None:
    taken = Taken(clock)

    def post(row_id: int, name: str = "") -> str:
        taken.note(1)
        return f"{name}{row_id}"

    wrapped = throttled(post, local({"publishMsgs": 10}))
    assert [wrapped(i, name="r") for i in range(3)] == ["r0", "r1", "r2"]
    assert taken.calls == [(0.1, 1), (0.2, 1), (0.3, 1)]
    assert wrapped.__name__ == "post"
    assert inspect.signature(wrapped) == inspect.signature(post)


class ShippedClient(LocalClient):
    """A `LocalClient` whose copies leave its limits behind, as a real client's do."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_quota": None}


def test_the_wrapper_pickles_without_its_processs_limits(local: Local) -> None:
    from pyspark import cloudpickle

    def post(key: tuple[int], pdf: Any) -> int:
        return key[0]

    wrapped = throttled(post, local({"publishMsgs": 10}, ShippedClient))
    assert wrapped((1,), None) == 1  # a call finds the limits, and keeps them for the task
    copy = cloudpickle.loads(cloudpickle.dumps(wrapped))

    assert copy._quota is None  # type: ignore[attr-defined]
    assert inspect.getfullargspec(copy).args == ["key", "pdf"]
    assert copy.__name__ == "post"
    assert repr(copy).startswith("throttled(<function ") and "kind='publish'" in repr(copy)
