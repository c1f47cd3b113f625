"""rgspark in real PySpark jobs (local mode) against a real admin server.

Rates are timed from the rows themselves: `logged` notes when each batch of rows reaches the
operator after `throttle` (the session keeps Arrow batches and worker buffers small, see
conftest, so rows get there within milliseconds), and a rate is the number of rows noted in
a window over its length. Tolerances are generous: the machine is shared, and precision is
the benchmark's job.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from benchmarks.spark_throttle import logged
from rgspark import (
    AuthenticationError,
    ConfigurationError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    ResourceGroupClient,
    ServerUnreachableError,
    ThrottledReader,
    ThrottleStats,
    TokenBucket,
    _quota,
    throttle,
    throttled_sink,
)
from rgspark._quota import NamespaceQuota
from rgspark.wire import BURST_S
from tests.conftest import SUPERUSER

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from tests.spark.conftest import FakeMonotonicClock, JobNamespace, RGServer

spark_job = pytest.mark.spark
T = TypeVar("T")

RATE = 2000  # msgs/s
ROWS = 20_000  # ten seconds' worth
REL = 0.3  # tolerance on rates measured over a window of a few seconds


# ---------------------------------------------------------------------------------------------
# Helpers. Whatever runs in Spark's Python workers is defined inside a function, so that
# cloudpickle ships it by value: workers cannot import this test module.


def run(df: DataFrame) -> None:
    """Run every row of `df` through the job, keeping none."""
    bounded(df.sparkSession, lambda: df.write.format("noop").mode("overwrite").save())


def bounded(spark: SparkSession, action: Callable[[], T], timeout_s: float = 90) -> T:
    """`action()`, or a failure after `timeout_s` with the session's jobs cancelled: a job
    held to a rate that went wrong must fail the test, not hang the run."""
    done = threading.Event()
    outcome: list[Any] = []

    def act() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    in_background(act)
    if not done.wait(timeout_s):
        spark.sparkContext.cancelAllJobs()
        done.wait(30)
        raise AssertionError(f"the job was still running after {timeout_s:.0f} s: cancelled")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    result: T = outcome[0]
    return result


def logged_stamps(directory: Path) -> list[float]:
    """Every row's time from the lines that `logged` (or a sink) wrote, in order."""
    stamps = []
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            t, rows = line.split()
            stamps += [float(t)] * int(rows)
    return sorted(stamps)


def first_stamp(directory: Path, timeout_s: float = 60) -> float:
    """Wait for the first rows to be logged in `directory` (while a job runs elsewhere)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stamps = [
            float(line.split()[0])
            for p in directory.glob("*.log")
            for line in p.read_text().splitlines()[:1]
        ]
        if stamps:
            return min(stamps)
        time.sleep(0.02)
    raise AssertionError(f"no rows flowed within {timeout_s} s")


def rate_between(stamps: list[float], start: float, end: float) -> float:
    """Rows per second stamped in ``(start, end]``."""
    assert end - start >= 0.5, f"a window of {end - start:.2f} s is too short to time a rate"
    return sum(1 for t in stamps if start < t <= end) / (end - start)


def arrow_bytes(df: DataFrame) -> int:
    """What the Arrow batches of `df` weigh in all, as `throttle` would see them."""
    total = df.sparkSession.sparkContext.accumulator(0)

    def weigh(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            total.add(batch.nbytes)
            yield batch

    run(df.mapInArrow(weigh, df.schema))
    return int(total.value)


def warm_up(spark: SparkSession, job: JobNamespace) -> None:
    """Start the Python workers, and the namespace's runtime in them, before timing a job.

    The job's shape (`throttle`, then `logged`) on both cores: a task takes a worker for each
    of the two operators. Uses a client of its own, so that the timed job's client counts
    only the timed job.
    """
    run(logged(throttle(spark.range(100, numPartitions=2), job.client(), "publish"), None))


def in_background(action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def timed(action: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    result = action()
    return result, time.monotonic() - start


# ---------------------------------------------------------------------------------------------
# A job's rate


@spark_job
def test_a_job_is_held_to_the_groups_msgs_rate(spark: SparkSession, rg_server: RGServer) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    warm_up(spark, job)
    df = spark.range(ROWS, numPartitions=4)
    client = job.client()

    count, elapsed = timed(lambda: bounded(spark, throttle(df, client, "publish").count))

    assert count == ROWS
    assert 7 <= elapsed <= 20, f"{ROWS} rows at {RATE} msgs/s took {elapsed:.1f} s"
    stats = client.stats["publish"]
    assert stats.rows == ROWS
    assert stats.bytes == arrow_bytes(df) > 0
    # Four tasks, two at a time, held back most of the ten seconds: summed over tasks, more
    # seconds held back than the action took.
    assert stats.task_throttled_s > 0.5 * elapsed
    last = stats.last
    assert last is not None
    assert (last.rows, last.bytes, last.task_throttled_s) == (
        stats.rows,
        stats.bytes,
        stats.task_throttled_s,
    )
    assert 0.8 * elapsed <= last.wall_s <= elapsed
    assert last.task_throttled_s > last.wall_s


@spark_job
def test_the_servers_usage_history_shows_what_a_job_sent(
    spark: SparkSession, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    warm_up(spark, job)
    df = spark.range(ROWS, numPartitions=4)
    # Each batch that leaves `throttle` is logged with the time: what went through, counted
    # here, apart from anything the server says.
    started = time.time()
    bounded(spark, lambda: run(logged(throttle(df, job.client(), "publish"), tmp_path)))
    ended = time.time()
    sent = [line.split() for log in tmp_path.glob("*.log") for line in log.read_text().splitlines()]
    assert sum(int(rows) for _, rows in sent) == ROWS

    # Usage is complete a lease and two intervals after its moment (`complete_after_s`).
    path = f"/admin/v2/resourcegroups/{job.group}/usage"
    deadline = time.monotonic() + 60
    while True:
        found = rg_server.admin.get(path, params={"since": 120}).json()
        resolution = found["resolutionSeconds"]
        usage = found["dimensions"]["publishRateInMsgs"]["usage"]
        # The moments whose window lies within the job, a second from each end (tasks start
        # and finish there), once complete.
        inside = [
            (moment, used)
            for moment, used in zip(found["times"], usage, strict=True)
            if started + 1 <= moment - resolution and moment <= ended - 1
        ]
        if inside and all(used is not None for _, used in inside):
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    assert len(inside) >= 3

    def went(start: float, end: float) -> int:
        return sum(int(rows) for at, rows in sent if start <= float(at) < end)

    # Over the job's steady seconds together, within 5% of what went through.
    span = (inside[0][0] - resolution, inside[-1][0])
    total = sum(used * resolution for _, used in inside)
    assert total == pytest.approx(went(*span), rel=0.05)
    # Second by second, no spike of reports sent at once: a second holds at most its rate
    # and a tenth of a second's burst, and so does what the server shows. (Neither the log
    # here nor the job's mean is a reference for one second: Spark's buffers carry up to a
    # third of a second's rows across a second's edge, and the job slows while two tasks
    # end and two start, measured on PySpark 3.5; tests/app/test_figures_live.py holds
    # each second to what rgspark workers sent.)
    for moment, used in inside:
        assert 0 < used <= 1.15 * RATE, (moment - started, used)


@spark_job
def test_a_job_is_held_to_the_groups_bytes_rate(spark: SparkSession, rg_server: RGServer) -> None:
    df = spark.range(ROWS, numPartitions=4).selectExpr(
        "id", "id * 7 AS a", "CAST(id AS DOUBLE) / 3 AS b"
    )
    nbytes = arrow_bytes(df)
    job = rg_server.namespace(publishRateInBytes=round(nbytes / 10))  # ten seconds' worth
    warm_up(spark, job)
    client = job.client()

    count, elapsed = timed(lambda: bounded(spark, throttle(df, client, "publish").count))

    assert count == ROWS
    assert 7 <= elapsed <= 20, f"{nbytes} bytes at {nbytes / 10:.0f} B/s took {elapsed:.1f} s"
    stats = client.stats["publish"]
    assert (stats.rows, stats.bytes) == (ROWS, nbytes)
    assert stats.task_throttled_s > 0.5 * elapsed


@spark_job
def test_stats_count_what_went_through_and_no_wait_when_unlimited(
    spark: SparkSession, rg_server: RGServer
) -> None:
    job = rg_server.namespace()  # a group with no rate set: nothing is limited
    df = spark.range(5000, numPartitions=3).selectExpr("id", "CAST(id AS STRING) AS s")
    client = job.client()

    assert bounded(spark, throttle(df, client, "dispatch").count) == 5000

    stats = client.stats["dispatch"]
    assert (stats.rows, stats.bytes, stats.task_throttled_s) == (5000, arrow_bytes(df), 0.0)
    assert "publish" not in client.stats
    assert repr(stats).startswith("ThrottleStats(kind='dispatch', rows=5000,")
    assert "last=ActionStats(rows=5000," in repr(stats)


@spark_job
def test_stats_tell_the_last_action_apart_from_the_running_totals(
    spark: SparkSession, rg_server: RGServer
) -> None:
    rate, rows = 10_000, 20_000  # two seconds' worth a write
    job = rg_server.namespace(publishRateInMsgs=rate)
    warm_up(spark, job)
    client = job.client()
    df = throttle(spark.range(rows, numPartitions=2), client, "publish")
    stats = client.stats["publish"]
    assert stats.last is None

    run(df)
    first = stats.last
    _, elapsed = timed(lambda: run(df))

    last = stats.last
    assert first is not None and last is not None
    assert (last.rows, stats.rows) == (rows, 2 * rows)
    assert (first.bytes, last.bytes) == (last.bytes, stats.bytes - first.bytes)
    assert stats.task_throttled_s == pytest.approx(first.task_throttled_s + last.task_throttled_s)
    assert 0.7 * rows / rate <= last.wall_s <= elapsed
    assert last.task_throttled_s > 0

    # Actions of the RDD API (a sink in foreachPartition) are told apart too.
    sink_stats = ThrottleStats(spark.sparkContext, "publish")
    sink = throttled_sink(rg_server.namespace().client(), "publish", len, stats=sink_stats)
    for n in (300, 500):
        bounded(spark, lambda n=n: spark.range(n, numPartitions=2).foreachPartition(sink))
    assert sink_stats.last is not None
    assert (sink_stats.last.rows, sink_stats.rows) == (500, 800)


@spark_job
def test_two_jobs_at_once_in_one_namespace_share_the_rate(
    spark: SparkSession, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    warm_up(spark, job)
    each = ROWS // 2  # alone, a job would take five seconds
    flows = [tmp_path / "a", tmp_path / "b"]
    errors: list[BaseException] = []

    def submit(flow: Path) -> None:
        flow.mkdir()
        # One partition each: the two jobs run side by side, one task each on the two cores.
        df = throttle(spark.range(each, numPartitions=1), job.client(), "publish")
        try:
            run(logged(df, flow))
        except BaseException as exc:
            errors.append(exc)

    threads = [in_background(lambda flow=flow: submit(flow)) for flow in flows]
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    a, b = (logged_stamps(flow) for flow in flows)
    assert (len(a), len(b)) == (each, each)
    # While both flow, together they flow at the group's rate, not at twice it.
    start, end = max(a[0], b[0]) + 0.5, min(a[-1], b[-1])
    assert end - start >= 3, "the two jobs hardly ran at once"
    rates = [rate_between(stamps, start, end) for stamps in (a, b)]
    assert sum(rates) == pytest.approx(RATE, rel=REL), rates
    assert min(rates) >= 0.1 * RATE, rates  # neither was starved
    # And overall, all their rows took about the time the group's rate allows.
    overall = 2 * each / (max(a[-1], b[-1]) - min(a[0], b[0]))
    assert overall == pytest.approx(RATE, rel=REL)


@spark_job
def test_a_quota_raised_then_lowered_mid_job_applies_within_two_report_intervals(
    spark: SparkSession, rg_server: RGServer, tmp_path: Path
) -> None:
    low, high = 1000, 4000
    rows = 20_000  # about 2 s at the low rate, 3 s at the high one, then 6 s at the low one
    job = rg_server.namespace(publishRateInMsgs=low)
    warm_up(spark, job)
    settle = 2 * rg_server.report_interval_s
    changes: list[float] = []

    def change_quota() -> None:
        first = first_stamp(tmp_path)
        for at, rate in ((first + 2, high), (first + 5, low)):
            time.sleep(max(0.0, at - time.time()))
            job.set_rates(publishRateInMsgs=rate)
            changes.append(time.time())

    changer = in_background(change_quota)
    run(logged(throttle(spark.range(rows, numPartitions=2), job.client(), "publish"), tmp_path))
    changer.join(timeout=60)

    stamps = logged_stamps(tmp_path)
    assert len(stamps) == rows
    raised, lowered = changes
    assert stamps[-1] >= lowered + settle + 2, "the job ended too soon to time the change"
    rates = {
        "before": rate_between(stamps, stamps[0] + 0.5, raised),
        "raised": rate_between(stamps, raised + settle, lowered),
        "lowered": rate_between(stamps, lowered + settle, lowered + settle + 2),
    }
    assert rates["before"] == pytest.approx(low, rel=REL), rates
    assert rates["raised"] == pytest.approx(high, rel=REL), rates
    assert rates["lowered"] == pytest.approx(low, rel=REL), rates


@spark_job
def test_a_job_finishes_at_its_last_allocation_when_the_server_stops(
    spark: SparkSession, own_server: tuple[RGServer, ExitStack], tmp_path: Path
) -> None:
    server, stack = own_server
    rows = 16_000  # eight seconds' worth
    flow = tmp_path / "flow"
    flow.mkdir()
    stopped: list[float] = []
    job = server.namespace(publishRateInMsgs=RATE)
    warm_up(spark, job)

    def stop_server() -> None:
        time.sleep(max(0.0, first_stamp(flow) + 3 - time.time()))
        # Answering nothing from here on: a stopping server refuses connections at once, and
        # only lets requests in flight (the workers' long polls on changes) run out.
        stopped.append(time.time())
        stack.close()

    stopper = in_background(stop_server)
    # One task: its allocation is the group's rate from its first report on. (With two, a
    # stop before the allocator has split the rate evenly leaves one task a trickle.)
    df = throttle(spark.range(rows, numPartitions=1), job.client(), "publish")
    run(logged(df, flow))  # raises if the job fails
    stopper.join(timeout=60)
    with pytest.raises(ServerUnreachableError):
        job.client().check()

    stamps = logged_stamps(flow)
    assert len(stamps) == rows
    gone = stopped[0]
    assert sum(1 for t in stamps if t > gone) >= rows / 4, "the server stopped too late"
    before = rate_between(stamps, stamps[0] + 0.5, gone)
    without = rate_between(stamps, gone + 0.5, stamps[-1] - 0.2)
    assert before == pytest.approx(RATE, rel=REL), (before, without)
    assert without == pytest.approx(before, rel=REL), (before, without)


# ---------------------------------------------------------------------------------------------
# Mistakes caught on the driver, at call time


@spark_job
def test_throttle_rejects_bad_arguments_on_the_driver(
    spark: SparkSession, rg_server: RGServer
) -> None:
    client = rg_server.namespace().client()
    df = spark.range(10)

    with pytest.raises(ConfigurationError, match="kind must be 'publish' or 'dispatch'"):
        throttle(df, client, "consume")
    with pytest.raises(TypeError, match=r"pyspark\.sql\.DataFrame, not list"):
        throttle([1, 2, 3], client, "publish")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ResourceGroupClient, not str"):
        throttle(df, rg_server.url, "publish")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="kind must be"):
        throttled_sink(client, "Publish", lambda rows: None)
    assert client.stats == {}  # nothing was set up for a call that failed


def test_a_client_needs_a_namespace() -> None:
    with pytest.raises(ConfigurationError, match="namespace must be a non-empty name"):
        ResourceGroupClient("http://127.0.0.1:1", tenant="t", namespace="")
    with pytest.raises(ConfigurationError, match="tenant must be"):
        ResourceGroupClient("http://127.0.0.1:1", tenant="t/x", namespace="ns")
    with pytest.raises(ConfigurationError, match="url must be"):
        ResourceGroupClient("127.0.0.1:8080", tenant="t", namespace="ns")


def test_check_returns_the_namespaces_group_and_limits(rg_server: RGServer) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE, dispatchRateInBytes=5_000_000)
    policy = job.client().check()
    assert policy["resourceGroup"] == job.group
    assert policy["limits"]["publishRateInMsgs"] == RATE
    assert policy["limits"]["dispatchRateInBytes"] == 5_000_000
    assert policy["limits"]["publishRateInBytes"] == -1
    assert policy["reportIntervalMs"] == round(rg_server.report_interval_s * 1000)


def test_check_says_what_is_wrong(rg_server: RGServer) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    from app.auth import create_token, generate_secret_key

    forged = create_token(subject=job.role, secret_key=generate_secret_key())

    def client(url: str = rg_server.url, **names: Any) -> ResourceGroupClient:
        options = {"tenant": job.tenant, "namespace": job.namespace, "token": job.token}
        return ResourceGroupClient(url, **{**options, **names}, timeout_s=5)

    with pytest.raises(ServerUnreachableError):
        client(closed).check()
    with pytest.raises(AuthenticationError) as rejected:
        client(token=forged).check()
    assert rejected.value.status_code == 401
    with pytest.raises(AuthenticationError):
        client(token=None).check()
    with pytest.raises(PermissionDeniedError) as denied:
        client(token=rg_server.token("stranger")).check()
    assert denied.value.status_code == 403
    # A role without rights learns nothing of what exists; one that may see it learns it is missing.
    with pytest.raises(PermissionDeniedError):
        client(namespace="missing").check()
    with pytest.raises(NamespaceNotFoundError) as missing:
        client(namespace="missing", token=rg_server.token(SUPERUSER)).check()
    assert missing.value.status_code == 404


# ---------------------------------------------------------------------------------------------
# Writes done by user code: the sink helper


@spark_job
def test_throttled_sink_in_foreach_partition_holds_the_rate(
    spark: SparkSession, rg_server: RGServer, tmp_path: Path
) -> None:
    job = rg_server.namespace(publishRateInMsgs=RATE)
    client = job.client()
    rows = 10_000
    stats = ThrottleStats(spark.sparkContext, "publish")
    sent = tmp_path

    def send(chunk: list[Any]) -> None:
        with (sent / f"{os.getpid()}.log").open("a") as log:
            log.write(f"{time.time()} {len(chunk)}\n")

    warm_up_sink = throttled_sink(job.client(), "publish", lambda chunk: None)
    bounded(spark, lambda: spark.range(10, numPartitions=2).foreachPartition(warm_up_sink))
    sink = throttled_sink(client, "publish", send, size=lambda row: 8, stats=stats)
    _, elapsed = timed(
        lambda: bounded(spark, lambda: spark.range(rows, numPartitions=2).foreachPartition(sink))
    )

    stamps = logged_stamps(sent)
    assert len(stamps) == rows
    # No chunk is more than about 100 ms of the rate.
    assert max(Counter(stamps).values()) <= RATE * BURST_S
    assert 3.5 <= elapsed <= 10, f"{rows} rows at {RATE} msgs/s took {elapsed:.1f} s"
    assert rate_between(stamps, stamps[0] + 0.5, stamps[-1]) == pytest.approx(RATE, rel=REL)
    assert (stats.rows, stats.bytes) == (rows, 8 * rows)
    assert stats.task_throttled_s > 0


# ---------------------------------------------------------------------------------------------
# The sink helper's chunks, and bulk reads charged after the fact (plain Python, fake time)


@pytest.fixture
def fake_buckets(monkeypatch: pytest.MonkeyPatch, clock: FakeMonotonicClock) -> FakeMonotonicClock:
    """Namespace buckets made from now on run on the fake clock."""

    def bucket(rate: float) -> TokenBucket:
        return TokenBucket(rate, rate * BURST_S, initial_tokens=0, clock=clock)

    monkeypatch.setattr(_quota, "_bucket", bucket)
    # Plain Python, with no Spark driver: the session the tests share is not the sinks'.
    monkeypatch.setattr("rgspark._spark.active_session", lambda: None)
    return clock


class LocalClient(ResourceGroupClient):
    """A client whose limits are given, instead of fetched from a server by a runtime."""

    def __init__(self, quota: NamespaceQuota) -> None:
        super().__init__("http://127.0.0.1:1", tenant=quota.tenant, namespace=quota.namespace)
        self._quota = quota

    def quota(self, kind: str) -> NamespaceQuota:
        self._quota.use(kind)
        return self._quota


def sink_sends(
    clock: FakeMonotonicClock, rates: dict[str, float], rows: list[bytes], **options: Any
) -> list[tuple[float, int, int]]:
    """Run `rows` through a `throttled_sink` held to `rates`, on fake time: what each call
    of the user's function got, as (fake seconds since the start, rows, bytes)."""
    quota = NamespaceQuota("t", "ns", sleep=clock.sleep)
    quota.apply(rates)
    start = clock() / 1e9
    sends: list[tuple[float, int, int]] = []

    def send(chunk: list[bytes]) -> None:
        sends.append((round(clock() / 1e9 - start, 6), len(chunk), sum(map(len, chunk))))

    throttled_sink(LocalClient(quota), "publish", send, **options)(iter(rows))
    return sends


def test_sink_sends_about_100_ms_of_the_msgs_rate_at_a_time(
    fake_buckets: FakeMonotonicClock,
) -> None:
    rows = [b"x" * 10] * 1000
    sends = sink_sends(fake_buckets, {"publishMsgs": 2000}, rows)
    # 200 rows a call, each paid for (100 ms) before the next call.
    assert sends == [(round(0.1 * i, 6), 200, 2000) for i in range(5)]


def test_sink_sends_about_100_ms_of_the_bytes_rate_at_a_time(
    fake_buckets: FakeMonotonicClock,
) -> None:
    rows = [b"x" * 100] * 50  # 5,000 bytes: half a second at 10,000 B/s
    sends = sink_sends(fake_buckets, {"publishBytes": 10_000}, rows, size=len)
    assert sends == [(round(0.1 * i, 6), 10, 1000) for i in range(5)]


def test_sink_never_splits_a_row_larger_than_100_ms(fake_buckets: FakeMonotonicClock) -> None:
    rows = [b"x" * 300, b"x" * 3000, b"x" * 300, b"x" * 300, b"x" * 300]
    sends = sink_sends(fake_buckets, {"publishBytes": 10_000}, rows, size=len)
    assert [(n, nbytes) for _, n, nbytes in sends] == [(1, 300), (1, 3000), (3, 900)]
    assert [t for t, _, _ in sends] == [0.0, 0.03, 0.33]


def test_sink_without_limits_sends_in_bounded_chunks(fake_buckets: FakeMonotonicClock) -> None:
    sends = sink_sends(fake_buckets, {}, [b"x"] * 2500, size=len)
    assert sends == [(0.0, 1000, 1000), (0.0, 1000, 1000), (0.0, 500, 500)]


class Source:
    """Reads of given sizes, noting the fake time each one started."""

    def __init__(self, clock: FakeMonotonicClock, sizes: list[int]) -> None:
        self.clock = clock
        self.sizes = sizes
        self.started: list[float] = []

    def read(self) -> bytes:
        self.started.append(self.clock() / 1e9)
        return b"x" * self.sizes[len(self.started) - 1]


def reader_on(
    clock: FakeMonotonicClock, rate: float, **options: Any
) -> tuple[ThrottledReader, float]:
    quota = NamespaceQuota("t", "ns")
    quota.apply({"dispatchBytes": rate})
    reader = ThrottledReader(
        quota, "dispatch", clock=lambda: clock() / 1e9, sleep=clock.sleep, **options
    )
    return reader, clock() / 1e9


def test_reader_charges_after_each_read_and_delays_the_next_while_in_debt(
    fake_buckets: FakeMonotonicClock,
) -> None:
    clock = fake_buckets
    reader, start = reader_on(clock, 1000)  # bytes/s
    source = Source(clock, [500, 3000, 200, 100])

    assert reader.read(source.read) == b"x" * 500  # nothing owed yet: read at once
    assert (reader.times_limited, reader.throttled_s) == (0, 0.0)
    reader.read(source.read)  # waits for the first 500 bytes: 0.5 s
    reader.read(source.read)  # the 3000 bytes were read whole, then paid for: 3 s
    clock.advance(5.0)  # idle long enough to owe nothing
    reader.read(source.read)

    offsets = [round(t - start, 6) for t in source.started]
    assert offsets == [0.0, 0.5, 3.5, 8.5]
    assert reader.times_limited == 2
    assert reader.throttled_s == pytest.approx(3.5)


def test_a_read_charged_at_a_trickle_waits_only_until_the_share_arrives(
    fake_buckets: FakeMonotonicClock,
) -> None:
    clock = fake_buckets
    quota = NamespaceQuota("t", "ns")
    quota.apply({"dispatchBytes": 10})  # an idle worker's trickle: 10 B/s

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock() / 1e9 - start >= 0.3:  # the worker's share, 0.3 s into the wait
            quota.apply({"dispatchBytes": 10_000})

    reader = ThrottledReader(quota, "dispatch", clock=lambda: clock() / 1e9, sleep=sleep)
    start = clock() / 1e9
    source = Source(clock, [1000, 1000])
    reader.read(source.read)  # 1000 bytes at 10 B/s: 99 s owed at the trickle
    reader.read(source.read)

    # Released by the share (debt of 997 bytes at 10,000 B/s), not after 99 s.
    assert source.started[1] - start == pytest.approx(0.4, abs=0.1)
    assert reader.throttled_s == pytest.approx(source.started[1] - start)


def test_reader_counts_the_most_bytes_read_in_one_window(fake_buckets: FakeMonotonicClock) -> None:
    clock = fake_buckets
    reader, _ = reader_on(clock, 1000, window_s=1.0)
    source = Source(clock, [250] * 12)
    for _ in range(12):
        reader.read(source.read)
    # Held to 1000 B/s, a window of 1 s holds four reads of 250 bytes.
    assert reader.max_window_bytes == 1000
    assert reader.times_limited == 11
    assert reader.throttled_s == pytest.approx(11 * 0.25)


def test_reader_takes_a_size_function_and_leaves_unlimited_reads_alone(
    fake_buckets: FakeMonotonicClock,
) -> None:
    clock = fake_buckets
    reader, start = reader_on(clock, -1)  # unlimited
    for _ in range(5):
        reader.read(lambda: [1, 2, 3], size=lambda items: 10_000 * len(items))
    assert (reader.times_limited, reader.throttled_s) == (0, 0.0)
    assert clock() / 1e9 == start  # never slept
    assert reader.max_window_bytes == 5 * 30_000
