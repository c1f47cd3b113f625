"""Does a throttled Spark job hold its group's rate, and what does `throttle` cost unlimited?

    python -m benchmarks.spark_throttle [--quick] [--seconds 20] [--rate 2000] [--cores 2]
                                        [--rows 3000000] [--rounds 10] [--report-interval S]
                                        [--charges 20000]

prints one JSON object with these figures, measured with real PySpark in local mode (``--cores``
worker slots) against ``rgadmin serve`` on a SQLite database of its own, in a temporary
folder, with the server's default report interval unless ``--report-interval`` says otherwise:

- ``accuracy``: ``--seconds`` worth of rows, in one partition per core, go through
  ``throttle(df, client, "publish")`` in a namespace whose group allows ``--rate`` msgs/s
  (``msgs``); then as many rows of three fixed-width columns, in a group whose bytes rate lets
  their Arrow bytes through in ``--seconds`` (``bytes``). Every batch leaving `throttle` is
  timed by the operator after it (a ``mapInArrow`` that logs the time and row count per
  batch; Arrow batches of 100 rows and 1 KiB worker buffers, so rows reach it within
  milliseconds of their release). The achieved rate is taken over the steady part: from two
  seconds after the last task's first rows to the first task's last rows (every task is
  running, Spark's startup and the tasks' first allocation are left out), counting the rows
  logged after the window's first log line up to and including its last. Bytes are counted
  at the bytes per row that `throttle` charged (``client.stats["publish"]``). Bar: within 5%
  of the quota, over at least 15 s.
- ``overhead``: in a namespace whose group limits nothing, the throughput of
  ``throttle(df)`` against an identity ``mapInArrow`` on the same DataFrame (``--rows`` rows of
  four columns, written to Spark's ``noop`` sink), in ``--rounds`` pairs run back to back,
  alternating which goes first, with Spark's default Arrow batch (10,000 rows) and buffer
  sizes. The figure is the median over pairs of throttle's throughput over the identity's, so
  that load drifting on a shared machine cancels within each pair; the fastest rounds and the
  rows per CPU second (the JVM's process tree, which holds the Python workers, plus the
  server) are compared too. Bar: at least 0.95.
- ``reporting``: what a job of short tasks costs the server in reports. Spark starts a task
  per partition, and each announces its kind to rgspark; a throttled worker's demand is
  measured over the short times it is not held back. The job (run first, so that no other
  client's reporters are about) sends twice ``--seconds`` worth of rows (so that its window
  holds several leases) through ``throttle`` in a group of its own that allows ``--rate``
  msgs/s, in partitions of about `SHORT_TASK_S` each per worker. The figure is the reports
  the server answered per worker (``--cores`` Python workers, reused from task to task) per
  lease (the server's default, 8 s), over the job but its first `SETTLE_S`, when the
  workers join and settle (the whole job when it is shorter). Bar: at most
  `REPORTS_PER_LEASE_BAR`: a steady worker reports once a lease, and its shares' wakes and
  settling add some.

- ``charge_cost``: what the limiter costs on the path Spark takes when a group limits
  something: microseconds per ``NamespaceQuota.acquire`` (as `throttle` and `throttled_sink`
  call it for each slice: `Limiter.reserve` on the msgs and bytes buckets, the wait's check,
  the demand estimators' record), in this process, no Spark. The rate is so high that no
  call waits, so the figure is the limiter's cost alone, not the throttling it is there for.
  The median over ``--rounds`` rounds. Information, no bar: a throttled task charges about
  ten times a second (slices of `BURST_S` of its rate), so this cost is a few parts in a
  hundred thousand of its time, and the overhead bar holds throttle's whole cost.

``--quick`` shrinks everything for a smoke test: its accuracy window is too short for the bar,
and a job too short to have a steady part is timed over its whole flow (``steady_part``:
false).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from app.auth import create_token, generate_secret_key
from app.config import Settings
from benchmarks._servers import (
    HOST,
    Server,
    process_tree_cpu_seconds,
    serve_rgadmin,
    server_env,
    stop,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from rgspark import ResourceGroupClient

ACCURACY_BAR = 0.05
CHARGE_PATH = "NamespaceQuota.acquire -> Limiter.reserve -> TokenBucket (msgs and bytes)"
# A slice of a throttled batch at the accuracy jobs' default quota: 100 ms of 2,000 rows/s
# of 8 bytes each. The amounts do not change the cost; ints, as Spark's row counts and
# Arrow sizes are.
CHARGE_ROWS, CHARGE_BYTES = 200, 1600
UNWAITED_RATE = 1e12  # per second: no charge of the measured path ever waits
REPORTS_PER_LEASE_BAR = 2.0
SHORT_TASK_S = 0.5  # of a worker's share of the rate: a short task's rows
SETTLE_S = 5.0  # of a reporting job: its workers join and settle
REPORTS_ROUTE = 'method="POST",route="/quota/v1/reporters/{reporterId}/reports"'
OVERHEAD_BAR = 0.95
MIN_WINDOW_S = 15.0
# Left out after the last task's first rows: startup and first allocations (a quarter of
# the flow at most, for short runs).
HEAD_S = 2.0
SUPERUSER = "admin"
ROLE = "bench-job"
TENANT = "bench"


@dataclass
class Setup:
    server: Server
    url: str
    secret_key: bytes
    admin: httpx.Client

    def put_group(self, group: str, **rates: int) -> None:
        self._call("PUT", f"/admin/v2/resourcegroups/{group}", rates)

    def namespace(self, namespace: str, group: str) -> None:
        path = f"/admin/v2/namespaces/{TENANT}/{namespace}"
        self._call("PUT", path)
        self._call("POST", f"{path}/resourcegroup/{group}")
        self._call("POST", f"{path}/permissions/{ROLE}", ["produce"])

    def client(self, namespace: str) -> ResourceGroupClient:
        from rgspark import ResourceGroupClient

        token = create_token(subject=ROLE, secret_key=self.secret_key)
        return ResourceGroupClient(self.url, tenant=TENANT, namespace=namespace, token=token)

    def _call(self, method: str, path: str, body: Any = None) -> None:
        response = self.admin.request(method, path, json=body)
        if response.status_code != 204:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")


@contextlib.contextmanager
def admin_server(
    workdir: Path, report_interval_s: float | None = None, settings: Mapping[str, str] = {}
) -> Iterator[Setup]:
    """``rgadmin serve`` on a new SQLite database (made and migrated on start) in `workdir`,
    with the given ``RG_*`` `settings`."""
    secret_key = generate_secret_key()
    env = server_env(f"sqlite:///{workdir / 'rg.db'}", secret_key, SUPERUSER) | dict(settings)
    if report_interval_s is not None:
        env["RG_REPORT_INTERVAL_SECONDS"] = str(report_interval_s)
    server = serve_rgadmin(workdir, "rgadmin", env)
    try:
        url = f"http://{HOST}:{server.port}"
        token = create_token(subject=SUPERUSER, secret_key=secret_key)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as admin:
            setup = Setup(server, url, secret_key, admin)
            setup._call("PUT", f"/admin/v2/tenants/{TENANT}", {})
            yield setup
    finally:
        stop(server)


@contextlib.contextmanager
def spark_session(cores: int, conf: dict[str, str] | None = None) -> Iterator[SparkSession]:
    """A local SparkSession whose Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("rgspark-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def run(df: DataFrame) -> None:
    """Every row of `df` through the job, none kept."""
    df.write.format("noop").mode("overwrite").save()


def logged(df: DataFrame, directory: Path | None) -> DataFrame:
    """`df`, with a line ``<epoch seconds> <rows>`` per batch in a file per worker process."""

    def log(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if directory is not None:
                with (directory / f"{os.getpid()}.log").open("a") as out:
                    out.write(f"{time.time()} {batch.num_rows}\n")
            yield batch

    return df.mapInArrow(log, df.schema)


def arrow_bytes(df: DataFrame) -> int:
    total = df.sparkSession.sparkContext.accumulator(0)

    def weigh(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            total.add(batch.nbytes)
            yield batch

    run(df.mapInArrow(weigh, df.schema))
    return int(total.value)


def steady_rate(directory: Path, head_s: float) -> dict[str, Any]:
    """Rows per second while every task ran, past the first `head_s` (see the docstring)."""
    logs = []
    for path in directory.glob("*.log"):
        lines = [line.split() for line in path.read_text().splitlines()]
        if lines:
            logs.append([(float(t), int(rows)) for t, rows in lines])
    if not logs:
        raise RuntimeError("no rows were logged")
    start = max(log[0][0] for log in logs) + head_s
    end = min(log[-1][0] for log in logs)
    batches = sorted(entry for log in logs for entry in log if start <= entry[0] <= end)
    everything = sorted(entry for log in logs for entry in log)
    # Two batches a moment apart time nothing: a steady part spans a tenth of a second at least.
    steady = len(batches) >= 2 and batches[-1][0] - batches[0][0] >= 0.1
    if not steady:  # a job too short to have a steady part (a smoke run): its whole flow
        batches = everything
    if len(batches) < 2:
        raise RuntimeError("too few batches to time: make the job longer")
    first, last = batches[0][0], batches[-1][0]
    rows = sum(rows for _, rows in batches[1:])
    return {
        "steady": steady,
        "rows_per_s": rows / (last - first),
        "window_s": last - first,
        "rows_in_window": rows,
        "flow_s": everything[-1][0] - everything[0][0],
        "tasks": len(logs),
    }


def accuracy(
    spark: SparkSession,
    setup: Setup,
    namespace: str,
    df: DataFrame,
    quota: float,
    unit: str,
    workdir: Path,
    head_s: float,
) -> dict[str, Any]:
    from rgspark import throttle

    # Warm-up, with a client of its own: the workers and the namespace's runtime in them.
    tasks = df.rdd.getNumPartitions()
    warm = spark.range(50 * tasks, numPartitions=tasks)
    run(logged(throttle(warm, setup.client(namespace), "publish"), None))
    client = setup.client(namespace)
    directory = Path(tempfile.mkdtemp(dir=workdir))
    started = time.perf_counter()
    run(logged(throttle(df, client, "publish"), directory))
    action_s = time.perf_counter() - started
    stats = client.stats["publish"]
    steady = steady_rate(directory, head_s)
    per_row = stats.bytes / stats.rows if unit == "bytes/s" else 1.0
    achieved = steady["rows_per_s"] * per_row
    return {
        "quota": quota,
        "unit": unit,
        "achieved": round(achieved, 1),
        "error": round(achieved / quota - 1, 4),
        "within_bar": abs(achieved / quota - 1) <= ACCURACY_BAR,
        "window_s": round(steady["window_s"], 2),
        "long_enough": steady["steady"] and steady["window_s"] >= MIN_WINDOW_S,
        "steady_part": steady["steady"],
        "rows_in_window": steady["rows_in_window"],
        "rows": stats.rows,
        "bytes": stats.bytes,
        "bytes_per_row": round(stats.bytes / stats.rows, 2),
        "tasks": steady["tasks"],
        "flow_s": round(steady["flow_s"], 2),
        "action_s": round(action_s, 2),
        "action_rate": round(stats.rows * per_row / action_s, 1),
        "throttled_task_s": round(stats.task_throttled_s, 2),
    }


def reports_answered(setup: Setup) -> float:
    """The reports the server has answered so far (its request counter)."""
    text = setup.admin.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rg_http_requests_total{") and REPORTS_ROUTE in line
    )


def reporting(
    spark: SparkSession, setup: Setup, namespace: str, rate: float, seconds: float, cores: int
) -> dict[str, Any]:
    from rgspark import throttle

    client = setup.client(namespace)
    run(throttle(spark.range(50 * cores, numPartitions=cores), client, "publish"))  # warm-up
    partitions = max(cores, round(seconds / SHORT_TASK_S) * cores)
    df = spark.range(round(rate * seconds), numPartitions=partitions)
    settled: list[tuple[float, float]] = []
    timer = threading.Timer(
        SETTLE_S, lambda: settled.append((time.perf_counter(), reports_answered(setup)))
    )
    started, before = time.perf_counter(), reports_answered(setup)
    timer.start()
    run(throttle(df, client, "publish"))
    timer.cancel()
    ended, after = time.perf_counter(), reports_answered(setup)
    timer.join()
    steady = bool(settled) and settled[0][0] < ended
    since, counted = settled[0] if steady else (started, before)
    lease_s = Settings().report_lease_seconds
    per_lease = (after - counted) / cores / (ended - since) * lease_s
    return {
        "partitions": partitions,
        "workers": cores,
        "task_s": round((ended - started) * cores / partitions, 2),
        "window_s": round(ended - since, 2),
        "steady_part": steady,
        "reports": round(after - before),
        "reports_in_window": round(after - counted),
        "lease_s": lease_s,
        "reports_per_worker_lease": round(per_lease, 2),
        "bar": REPORTS_PER_LEASE_BAR,
        "meets_bar": per_lease <= REPORTS_PER_LEASE_BAR,
    }


def overhead(
    spark: SparkSession,
    client: ResourceGroupClient,
    server: Server,
    rows: int,
    rounds: int,
    cores: int,
) -> dict[str, Any]:
    """Throttle's throughput against the identity's, in pairs (see the module's docstring)."""
    jobs = _overhead_jobs(spark, client, rows, cores)
    cpu_seconds = _job_cpu_clock(spark, server)

    def timed(name: str) -> Round:
        cpu = cpu_seconds()
        started = time.perf_counter()
        run(jobs[name])
        wall = time.perf_counter() - started
        after = cpu_seconds()
        used = None if cpu is None or after is None or after <= cpu else after - cpu
        return Round(rows / wall, None if used is None else rows / used)

    for name in jobs:  # warm-up: workers started, and the namespace's runtime in them
        timed(name)
    pairs = []
    for i in range(rounds):
        order = ("identity", "throttle") if i % 2 == 0 else ("throttle", "identity")
        pairs.append({name: timed(name) for name in order})
    return _overhead_summary(pairs, rows, rounds, client)


def _overhead_jobs(
    spark: SparkSession, client: ResourceGroupClient, rows: int, cores: int
) -> dict[str, DataFrame]:
    """The same DataFrame through an identity ``mapInArrow`` and through `throttle`."""
    from rgspark import throttle

    df = spark.range(rows, numPartitions=cores).selectExpr(
        "id", "id * 3 AS a", "CAST(id AS DOUBLE) * 0.5 AS b", "CAST(id % 1000 AS STRING) AS s"
    )

    def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    return {
        "identity": df.mapInArrow(identity, df.schema),
        "throttle": throttle(df, client, "publish"),
    }


def _job_cpu_clock(spark: SparkSession, server: Server) -> Callable[[], float | None]:
    """A clock of the CPU seconds a job and its reports take (None where unknown)."""
    # The JVM runs the Python workers: its process tree is the job's CPU, and the server's
    # is the reports'. Other load on the machine is in neither.
    gateway = getattr(spark.sparkContext, "_gateway", None)
    jvm_pid: int | None = getattr(getattr(gateway, "proc", None), "pid", None)

    def cpu_seconds() -> float | None:
        jvm = None if jvm_pid is None else process_tree_cpu_seconds(jvm_pid)
        served = server.cpu_seconds()
        return None if jvm is None or served is None else jvm + served

    return cpu_seconds


def _overhead_summary(
    pairs: list[dict[str, Round]], rows: int, rounds: int, client: ResourceGroupClient
) -> dict[str, Any]:
    names = ("identity", "throttle")
    ratios = [pair["throttle"].rows_per_s / pair["identity"].rows_per_s for pair in pairs]
    medians = {name: statistics.median(pair[name].rows_per_s for pair in pairs) for name in names}
    best = {name: max(pair[name].rows_per_s for pair in pairs) for name in names}
    cpu_ratios = [
        pair["throttle"].rows_per_cpu_s / pair["identity"].rows_per_cpu_s
        for pair in pairs
        if pair["throttle"].rows_per_cpu_s and pair["identity"].rows_per_cpu_s
    ]
    ratio = statistics.median(ratios)
    return {
        "rows": rows,
        "rounds": rounds,
        "columns": "bigint, bigint, double, string",
        "identity_rows_per_s": round(medians["identity"]),
        "throttle_rows_per_s": round(medians["throttle"]),
        "ratio": round(ratio, 4),
        "ratio_of_medians": round(medians["throttle"] / medians["identity"], 4),
        "ratio_of_best": round(best["throttle"] / best["identity"], 4),
        "cpu_ratio": round(statistics.median(cpu_ratios), 4) if cpu_ratios else None,
        "pair_ratios": [round(r, 4) for r in ratios],
        "pairs_rows_per_s": [
            {name: round(result.rows_per_s) for name, result in pair.items()} for pair in pairs
        ],
        "throttled_task_s": round(client.stats["publish"].task_throttled_s, 3),
        "bar": OVERHEAD_BAR,
        "meets_bar": ratio >= OVERHEAD_BAR,
    }


def charge_cost(calls: int, rounds: int) -> dict[str, Any]:
    """Microseconds per charge of the path Spark takes (see the module's docstring)."""
    from rgspark._quota import NamespaceQuota

    waits: list[float] = []
    quota = NamespaceQuota(TENANT, "cost", initial_rate=UNWAITED_RATE, sleep=waits.append)
    acquire = quota.acquire
    acquire("publish", CHARGE_ROWS, CHARGE_BYTES)  # warm-up; the buckets start empty
    waits.clear()
    per_call = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            acquire("publish", CHARGE_ROWS, CHARGE_BYTES)
        per_call.append((time.perf_counter() - started) / calls * 1e6)
    return {
        "path": CHARGE_PATH,
        "us_per_charge": round(statistics.median(per_call), 2),
        "fastest_round_us": round(min(per_call), 2),
        "calls": calls,
        "rounds": rounds,
        "amounts": {"msgs": CHARGE_ROWS, "bytes": CHARGE_BYTES},
        "rate": UNWAITED_RATE,
        "waits": len(waits),
    }


@dataclass
class Round:
    rows_per_s: float
    rows_per_cpu_s: float | None


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--seconds", type=float, help="flow per accuracy job (default 20)")
    parser.add_argument("--rate", type=int, default=2000, help="msgs/s quota (default 2000)")
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--rows", type=int, help="rows per overhead round (default 3,000,000)")
    parser.add_argument("--rounds", type=int, help="overhead pairs (default 10)")
    parser.add_argument(
        "--report-interval", type=float, help="the server's report interval (default: its own)"
    )
    parser.add_argument("--charges", type=int, help="calls per charge_cost round (default 20,000)")
    args = parser.parse_args(argv)
    quick = {"seconds": 4.0, "rows": 100_000, "rounds": 2, "charges": 2000}
    full = {"seconds": 20.0, "rows": 3_000_000, "rounds": 10, "charges": 20_000}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the context managers: the server is stopped


def run_in_workdir(
    prefix: str,
    benchmark: Callable[[argparse.Namespace, Path], dict[str, Any]],
    args: argparse.Namespace,
) -> int:
    """Run a Spark benchmark in a directory of its own (its server's data), removed after
    even when it is terminated, and print its report as one JSON object."""
    signal.signal(signal.SIGTERM, _terminate)
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        report = benchmark(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_in_workdir("rgspark-bench-", _benchmark, _parse_args(argv))


def _benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import pyspark

    head_s = min(HEAD_S, args.seconds / 4)
    # First, while nothing else of this benchmark runs.
    cost_per_charge = charge_cost(args.charges, args.rounds)
    with admin_server(workdir, args.report_interval) as setup:
        _add_groups(setup, args.rate)
        reports, msgs, nbytes = _small_batch_jobs(setup, args, workdir, head_s)
        cost = _overhead_job(setup, args)
        server_log = setup.server.log.read_text(errors="replace")
    meets = {
        "accuracy": all(r["within_bar"] and r["long_enough"] for r in (msgs, nbytes)),
        "overhead": cost["meets_bar"],
        "reporting": reports["meets_bar"],
    }
    return {
        "benchmark": "spark_throttle",
        "accuracy": {"msgs": msgs, "bytes": nbytes, "bar": ACCURACY_BAR},
        "overhead": cost,
        "reporting": reports,
        "charge_cost": cost_per_charge,
        "meets_bars": meets,
        "method": _method(head_s),
        "config": _config(args, server_log, pyspark.__version__),
    }


def _add_groups(setup: Setup, rate: int) -> None:
    """The groups known before Spark starts, each with its namespace: two at ``rate`` msgs/s
    and one that limits nothing. (The bytes group's rate is measured in Spark.)"""
    setup.put_group("msgs", publishRateInMsgs=rate)
    setup.namespace("msgs", "msgs")
    setup.put_group("short", publishRateInMsgs=rate)
    setup.namespace("short", "short")
    setup.put_group("open")  # no rate set: nothing limited
    setup.namespace("open", "open")


def _small_batch_jobs(
    setup: Setup, args: argparse.Namespace, workdir: Path, head_s: float
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The reporting job, then the msgs and bytes accuracy jobs: (reporting, msgs, bytes)."""
    cores, seconds = args.cores, args.seconds
    # Small batches and buffers, so that rows are timed as they leave `throttle`.
    timing = {
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
        "spark.buffer.size": "1024",
    }
    with spark_session(cores, timing) as spark:
        reports = reporting(spark, setup, "short", args.rate, 2 * seconds, cores)
        msgs_df = spark.range(round(args.rate * seconds), numPartitions=cores)
        msgs = accuracy(spark, setup, "msgs", msgs_df, args.rate, "msgs/s", workdir, head_s)
        bytes_df = spark.range(round(args.rate * seconds), numPartitions=cores).selectExpr(
            "id", "id * 7 AS a", "CAST(id AS DOUBLE) / 3 AS b"
        )
        byte_rate = round(arrow_bytes(bytes_df) / seconds)
        setup.put_group("bytes", publishRateInBytes=byte_rate)
        setup.namespace("bytes", "bytes")
        nbytes = accuracy(spark, setup, "bytes", bytes_df, byte_rate, "bytes/s", workdir, head_s)
    return reports, msgs, nbytes


def _overhead_job(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    """`overhead` in the group that limits nothing, at Spark's default batch and buffer sizes."""
    # Spark's defaults, said again: PySpark's builder keeps options given to earlier
    # sessions in this process.
    defaults = {
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
        "spark.buffer.size": "65536",
    }
    with spark_session(args.cores, defaults) as spark:
        client = setup.client("open")
        return overhead(spark, client, setup.server, args.rows, args.rounds, args.cores)


def _method(head_s: float) -> dict[str, str]:
    """How each figure is measured, as the report states it."""
    return {
        "reporting": (
            "A group of its own at --rate msgs/s; twice --seconds of rows in partitions of "
            f"about {SHORT_TASK_S:g} s per worker, through throttle(df, client, 'publish'), "
            "after one small warm-up job with the same client. Reports answered: the server's "
            "rg_http_requests_total for POST .../reports, read "
            f"{SETTLE_S:g} s into the job and at its end. Figure: those reports per worker "
            f"per lease ({Settings().report_lease_seconds:g} s). Bar: <= "
            f"{REPORTS_PER_LEASE_BAR:g}."
        ),
        "accuracy": (
            "Each job runs through throttle(df, client, 'publish') then an identity "
            "mapInArrow that logs (time, rows) per Arrow batch; maxRecordsPerBatch=100 and "
            "spark.buffer.size=1024 so that batches reach it within milliseconds of their "
            "release. Steady window: from the last task's first batch plus "
            f"{head_s:g} s to the first task's last batch, i.e. while every task runs, "
            "leaving out Spark's startup and the first allocations. Achieved rate: rows "
            "logged after the window's first batch up to its last, over the time between "
            "the two (over the whole flow when the job is too short to have a steady "
            "part: steady_part false); for bytes, times the bytes per row throttle charged "
            "(client.stats['publish']). Bar: |achieved/quota - 1| <= "
            f"{ACCURACY_BAR:g} over a window of at least {MIN_WINDOW_S:g} s."
        ),
        "overhead": (
            "A group with no rate set. Each round writes the same DataFrame to the noop "
            "sink through throttle(df) and through an identity mapInArrow, the two back to "
            "back in alternating order, with Spark's default batch and buffer sizes, after "
            "one untimed run of each. Figure (ratio): the median over rounds of throttle's "
            "rows/s over the identity's; ratio_of_best compares each side's fastest round, "
            "cpu_ratio the rows per CPU second of the JVM's process tree (Spark and its "
            f"Python workers) and the server. Bar: ratio >= {OVERHEAD_BAR:g}."
        ),
        "charge_cost": (
            f"In this process, before Spark starts: a NamespaceQuota whose four dimensions "
            f"allow {UNWAITED_RATE:g}/s (so that no call waits) and the real Limiter and "
            f"TokenBuckets behind it; acquire('publish', {CHARGE_ROWS}, {CHARGE_BYTES}) "
            "called --charges times per round, after one untimed call. Figure: the median "
            "over --rounds rounds of the microseconds per call. Information, no bar."
        ),
    }


def _config(args: argparse.Namespace, server_log: str, pyspark_version: str) -> dict[str, Any]:
    """The run's settings, what the server logged going wrong, and the software it ran on."""
    return {
        "master": f"local[{args.cores}]",
        "partitions": args.cores,
        "seconds": args.seconds,
        "quick": args.quick,
        "report_interval_s": args.report_interval,
        "server": "rgadmin serve --workers 1 --no-access-log (SQLite)",
        "server_errors_logged": server_log.count("Traceback"),
        "pyspark": pyspark_version,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(main())
