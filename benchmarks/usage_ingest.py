"""How much usage reporting does one server process take, on PostgreSQL?

    python -m benchmarks.usage_ingest [--quick] [--reporters 100] [--namespaces-per-reporter 5000]
                                      [--spread 5] [--settle-intervals 3] [--steady-intervals 5]
                                      [--broker-senders 1] [--broker-server-processes 1]
                                      [--changed-interval] [--shape both|broker|spark]
                                      [--spark-groups 1] [--spark-seconds 4] [--spark-every 1]
                                      [--spark-server-processes 1[,2]] [--postgres-url URL]

prints one JSON object with two figures for ``POST /quota/v1/reporters/{id}/reports``, each
measured on ``rgadmin serve --workers 1 --no-access-log`` against a PostgreSQL database created
for the run (migrated with ``rgadmin migrate``) and dropped afterwards:

- ``broker_scale``: PIP-82's "resource consumption" model. 100,000 namespaces, each in a
  group of its own with all four enforced rates set, each spread across 5 of 100 reporters,
  so each reporter reports 5,000 namespaces once per 60 s interval
  (``RG_REPORT_INTERVAL_SECONDS=60``). The figure is the server time one interval's 100
  reports take, sent one after another on one keep-alive connection: their wall time, the
  server process's CPU seconds and the PostgreSQL backends' CPU seconds (from /proc), and
  the bar is 10% of the interval. Intervals run back to back, each report sent with
  ``sentAtMs`` = now: the first inserts every row and plans every group; while the
  allocations settle (``--settle-intervals``, 3: newcomers start at a probe and grow into
  their shares over a few rounds, which real reporters run within an interval, as they are
  asked to report again soon) the groups are planned again; in the steady ones every figure
  moves by less than the 5% that forces a rewrite, so the server answers from what it keeps;
  with ``--changed-interval`` one more moves every demand by 10%, which rewrites every row
  and plans every group again, and the settling intervals after it are measured too.
  With ``--broker-senders N`` the reports go over N connections at once, as brokers that
  report at the same moment send them (reporter r always on connection r mod N, so on the
  server process that answered its last), and ``--broker-server-processes`` runs
  ``rgadmin serve --workers`` that many.
- ``spark``: many workers, each reporting one namespace every second
  (``RG_REPORT_INTERVAL_SECONDS=1``), all in one group unless ``--spark-groups`` says
  otherwise, on the same database. Each step is a fleet of its own: a server started anew
  on emptied usage tables, whose workers all join at once (within their first second) and
  settle in its warm-up (20 s: a worker plans its group at its first four reports, one plan
  of the group at a time); ``joins_max_ms`` says how long the last of them waited for its
  first answer. (Steps that shared a server measured each in the wake of the one before:
  its workers gone, every other worker of the group planned it again.) Open loop: a fixed
  rate of reports, spread evenly over each second, each worker on a keep-alive connection
  of its own, as an rgspark worker process holds one (so that its reports reach the server
  process that answered its last); latency counts from when a report was due, so a server
  that falls behind cannot hide it.
  With ``--spark-every`` over 1 (8: steady workers on the default lease), the server's
  leases last that long (``RG_REPORT_LEASE_SECONDS``), and each worker reports when its
  answers ask, as rgspark does: every lease once steady, sooner while it settles, later
  while the server paces the namespace (`app.quota.pacing`). The workers join over one
  lease (or over ``--spark-join-seconds``: a fleet that ramps up), and the warm-up lasts
  until the last answer of all but 1% of them held for the lease (up to five minutes, or
  ``--spark-warmup``): ``settled_s`` says when that was (null: they did not). What is
  measured then is the steady state, a report per worker per lease.
  The rate steps up (doubling, then bisecting) to the highest whose p99 latency stays under
  100 ms with no failures; that rate times the seconds between one worker's reports is how
  many worker processes one server process holds (their long polls on changes, a request
  each per 30 s, aside). With ``--spark-server-processes 1,2`` the shape runs against
  ``rgadmin serve --workers 1``, then ``--workers 2``, and ``spark_scaling`` gives each
  one's sustained rate over the first's.

Both report ``history_sampling``: the samples the server's usage-history sampler took during
the shape's run, the seconds they took, and that as a share of the run's wall time.

At PIP-82's full scale the default run takes about ten minutes, most of it the first and
settling broker intervals; ``--quick`` (20 reporters of 1,000 namespaces, shorter steps)
takes about one. The database is set up in bulk (COPY), not through the API. Tokens are
minted in-process with a fresh HS256 key handed to the server as
``RG_AUTH_TOKEN_SECRET_KEY``. Any failed
request (a status other than 200, a report not accepted, a broken connection, a timeout)
is counted and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg import sql
from sqlalchemy import make_url

from app.auth import create_token, generate_secret_key
from benchmarks._http_load import _run_loop, event_loop_name, percentile
from benchmarks._servers import (
    HOST,
    Server,
    process_tree_cpu_seconds,
    rgadmin,
    serve_rgadmin,
    server_env,
    stop,
    store_check,
)
from rgspark.wire import DIMENSIONS

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
SUPERUSER = "admin"
# Every group limits all four enforced dimensions, so nothing is skipped as unlimited.
GROUP_RATES = {
    "publish_rate_in_msgs": 1000,
    "publish_rate_in_bytes": 1_048_576,
    "dispatch_rate_in_msgs": 2000,
    "dispatch_rate_in_bytes": 2_097_152,
    "replication_dispatch_rate_in_msgs": -1,
    "replication_dispatch_rate_in_bytes": -1,
}
BYTES_PER_MSG = 1024
MAX_FANOUT = 3  # subscriptions per namespace: dispatch is publish times 1 to 3
BROKER_INTERVAL_S = 60.0
BROKER_BAR_FRACTION = 0.10
STEADY_JITTER = 0.02  # below the 5% under which a row need not be rewritten
CHANGE = 0.10  # above it: every row is rewritten
SPARK_INTERVAL_S = 1.0
# A new worker's first four reports each plan its group (it probes, then grows into its
# share), and the plans of a group run one at a time (under its lock): a step's warm-up
# gives the hundreds of workers that join at its start those plans (over 3,000 for 800
# workers, about ten seconds here) and the backlog they leave time to drain before measuring.
SETTLE_S = 20.0
SPARK_VERSIONS = 4  # versions of each worker's report, its figures jittered, sent in turn
P99_BAR_S = 0.100
NAMESPACES_PER_TENANT = 1000
REPORT_TIMEOUT_S = 600.0
SETTLED_LOOK_S = 0.5  # how often a step following its answers looks whether all settled
UNSETTLED = 0.01  # of its workers: those that may still be settling when it is measured
FOLLOW_WARMUP_S = 300.0  # the longest such a step waits for that
GRACE_S = 5.0  # reports still unanswered this long after a step are timeouts


# setup


@dataclass(frozen=True)
class Layout:
    """PIP-82's model: which namespaces each reporter serves."""

    reporters: int
    per_reporter: int
    spread: int

    @property
    def namespaces(self) -> int:
        return self.reporters * self.per_reporter // self.spread

    def served_by(self, reporter: int) -> list[int]:
        # Namespace n takes the `spread` consecutive reporters from `spread * n` (mod the
        # reporter count): every reporter serves exactly `per_reporter` namespaces, and each
        # namespace has `spread` distinct reporters.
        return [(reporter + j * self.reporters) // self.spread for j in range(self.per_reporter)]

    @staticmethod
    def tenant(namespace: int) -> str:
        return f"tenant-{namespace // NAMESPACES_PER_TENANT:04d}"

    @classmethod
    def ref(cls, namespace: int) -> str:
        return f"{cls.tenant(namespace)}/ns-{namespace:06d}"

    @staticmethod
    def group(namespace: int) -> str:
        return f"ns-group-{namespace:06d}"


def _libpq_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.contextmanager
def _database(postgres_url: str) -> Iterator[str]:
    """A new PostgreSQL database for the run; its URL is yielded and it is dropped afterwards."""
    name = f"rg_usage_ingest_{uuid.uuid4().hex[:10]}"
    admin = _libpq_url(postgres_url)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _migrate(database_url: str, env: dict[str, str], cwd: Path) -> None:
    subprocess.run(
        [*rgadmin(), "migrate"],
        cwd=cwd,
        env={**env, "RG_DATABASE_URL": database_url},
        check=True,
        capture_output=True,
    )


def _copy(
    connection: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Any
) -> None:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with connection.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _populate(database_url: str, layout: Layout, spark_groups: int) -> None:
    """Groups, tenants and namespaces for both shapes, attached, in a few COPYs."""
    rates = tuple(GROUP_RATES.values())
    namespaces = range(layout.namespaces)
    tenants = sorted({layout.tenant(n) for n in namespaces})
    with psycopg.connect(database_url) as connection:
        _copy(
            connection,
            "resource_groups",
            ["name", *GROUP_RATES],
            [
                *((layout.group(n), *rates) for n in namespaces),
                *((f"spark-group-{g}", *rates) for g in range(spark_groups)),
            ],
        )
        _copy(
            connection,
            "tenants",
            ["name", "admin_roles", "allowed_clusters"],
            ((tenant, "[]", "[]") for tenant in [*tenants, "spark"]),
        )
        _copy(
            connection,
            "namespaces",
            ["tenant", "name", "resource_group"],
            [
                *((layout.tenant(n), f"ns-{n:06d}", layout.group(n)) for n in namespaces),
                *(("spark", f"job-{g}", f"spark-group-{g}") for g in range(spark_groups)),
            ],
        )
        connection.execute("ANALYZE")


def _empty_usage(database_url: str) -> None:
    """Forget the brokers' reports: the Spark server would delete them as long silent (its
    interval is 1 s), in one big transaction and then every second over the dead rows. Their
    groups' sums in force and summaries go with them (a server makes a group's row anew)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("TRUNCATE quota_usage, quota_reporters, quota_groups, usage_counts")
        connection.execute("VACUUM ANALYZE")


# measuring the server and the database


class DatabaseCpu:
    """CPU seconds of the PostgreSQL backends serving one database, read from /proc."""

    def __init__(self, database_url: str) -> None:
        self.connection = psycopg.connect(database_url, autocommit=True)
        self.name = make_url(database_url).database

    def snapshot(self) -> dict[int, float]:
        rows = self.connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (self.name,),
        ).fetchall()
        seconds: dict[int, float] = {}
        for (pid,) in rows:
            cpu = process_tree_cpu_seconds(pid)
            if cpu is not None:
                seconds[pid] = cpu
        return seconds

    @staticmethod
    def spent(before: dict[int, float], after: dict[int, float]) -> float:
        # A backend started in between counts from 0; one gone in between is lost (rare).
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())

    def close(self) -> None:
        self.connection.close()


@dataclass
class Meter:
    server: Server
    database: DatabaseCpu
    wall: float = 0.0
    server_cpu: float | None = None
    database_cpu: float = 0.0
    worker_cpu: list[float] = field(default_factory=list)
    """Per server process of ``--workers`` N over 1, its share of ``server_cpu``."""
    _started: tuple[float, float | None, dict[int, float], dict[int, float]] | None = None

    def start(self) -> None:
        self._started = (
            time.perf_counter(),
            self.server.cpu_seconds(),
            self.database.snapshot(),
            self.server.worker_cpu_seconds(),
        )

    def stop(self) -> None:
        assert self._started is not None
        wall, cpu, database, workers = self._started
        self.wall = time.perf_counter() - wall
        after = self.server.cpu_seconds()
        self.server_cpu = None if cpu is None or after is None else after - cpu
        self.database_cpu = DatabaseCpu.spent(database, self.database.snapshot())
        self.worker_cpu = sorted(
            cpu - workers.get(pid, 0.0) for pid, cpu in self.server.worker_cpu_seconds().items()
        )


def _history_sampling(server: Server, started: float) -> dict[str, Any]:
    """What the server's usage-history sampler cost over the run (its own histogram)."""
    connection = http.client.HTTPConnection(HOST, server.port, timeout=REPORT_TIMEOUT_S)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    figures = {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if name in ("rg_usage_history_sample_seconds_count", "rg_usage_history_sample_seconds_sum")
    }
    seconds = figures.get("rg_usage_history_sample_seconds_sum", 0.0)
    return {
        "samples": round(figures.get("rg_usage_history_sample_seconds_count", 0.0)),
        "seconds": _round(seconds),
        "share_of_run_wall": _round(seconds / (time.perf_counter() - started), 4),
    }


# shape (a): PIP-82's brokers


@dataclass
class Interval:
    kind: str
    meter: Meter
    latencies: list[float]
    rows_written: int
    failed: int
    request_bytes: int
    response_bytes: int

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        return {
            "kind": self.kind,
            "server_wall_seconds": round(self.meter.wall, 3),
            "server_cpu_seconds": _round(self.meter.server_cpu),
            "server_cpu_seconds_by_process": [round(cpu, 3) for cpu in self.meter.worker_cpu],
            "database_cpu_seconds": round(self.meter.database_cpu, 3),
            "fraction_of_interval": round(self.meter.wall / BROKER_INTERVAL_S, 4),
            "server_cpu_ms_per_report": _round(
                None
                if self.meter.server_cpu is None
                else self.meter.server_cpu / max(len(self.latencies), 1) * 1000,
                1,
            ),
            "report_ms": {
                "p50": round(percentile(latencies, 0.5) * 1000, 1),
                "max": round(latencies[-1] * 1000, 1) if latencies else 0.0,
            },
            "rows_written": self.rows_written,
            "failed": self.failed,
            "mean_request_kib": round(self.request_bytes / max(len(latencies), 1) / 1024, 1),
            "mean_response_kib": round(self.response_bytes / max(len(latencies), 1) / 1024, 1),
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


class BrokerFleet:
    """The reporters' figures, and the report bodies they send each interval."""

    def __init__(self, layout: Layout, seed: int = 82) -> None:
        self.layout = layout
        self.random = random.Random(seed)
        share = GROUP_RATES["publish_rate_in_msgs"] / layout.spread

        # Publish demand between a fifth and 1.6 times an equal share of the quota, so about
        # half the groups want more than they have; messages of 0.2 to 2 KiB; 1 to 3
        # subscriptions. So the four dimensions' figures, and the allocator's inputs, differ.
        def base() -> tuple[float, float, float, float]:
            msgs = share * self.random.uniform(0.2, 1.6)
            size = self.random.uniform(0.2, 2.0) * BYTES_PER_MSG
            fanout = self.random.randint(1, MAX_FANOUT)
            return (msgs, msgs * size, msgs * fanout, msgs * size * fanout)

        self.demand = [
            [base() for _ in range(layout.per_reporter)] for _ in range(layout.reporters)
        ]
        self.refs = [[layout.ref(n) for n in layout.served_by(r)] for r in range(layout.reporters)]

    def bodies(self, kind: str) -> list[tuple[bytes, bytes]]:
        """Per reporter, its report around ``sentAtMs``: (bytes before it, bytes after it)."""
        if kind == "changed":
            grow = 1 + CHANGE
            self.demand = [
                [(a * grow, b * grow, c * grow, d * grow) for a, b, c, d in row]
                for row in self.demand
            ]
        jitter = self.random.uniform
        interval_ms = round(BROKER_INTERVAL_S * 1000)
        bodies = []
        for reporter in range(self.layout.reporters):
            parts = []
            for ref, rates in zip(self.refs[reporter], self.demand[reporter], strict=True):
                dims = []
                for name, steady in zip(DIMENSIONS, rates, strict=True):
                    # Each figure wanders less than the 5% that forces a rewrite.
                    rate = steady * (1 + jitter(-STEADY_JITTER, STEADY_JITTER))
                    used = round(rate * BROKER_INTERVAL_S)
                    dims.append(f'"{name}":{{"used":{used},"demand":{rate:.3f}}}')
                parts.append(f'"{ref}":{{{",".join(dims)}}}')
            suffix = f',"intervalMs":{interval_ms},"namespaces":{{{",".join(parts)}}}}}'
            bodies.append((b'{"sentAtMs":', suffix.encode()))
        return bodies


def _post(
    connection: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, response.read()


def _broker_interval(
    meter: Meter,
    bodies: list[tuple[bytes, bytes]],
    token: str,
    kind: str,
    connections: list[http.client.HTTPConnection],
    order: list[int],
) -> Interval:
    """Send one interval's reports: reporter r on ``connections[r % len(connections)]``,
    each connection's reporters in ``order``, every connection at once (one after another
    with one)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    answers: list[tuple[int, bytes]] = []

    def send(connection: http.client.HTTPConnection, reporters: list[int]) -> int:
        sent = 0
        for reporter in reporters:
            prefix, suffix = bodies[reporter]
            body = prefix + str(round(time.time() * 1000)).encode() + suffix
            sent += len(body)
            started = time.perf_counter()
            answer = _post(
                connection, f"/quota/v1/reporters/broker-{reporter:03d}/reports", body, headers
            )
            # Appended from several threads: list.append is atomic.
            latencies.append(time.perf_counter() - started)
            answers.append(answer)
        return sent

    per_connection = [
        [reporter for reporter in order if reporter % len(connections) == index]
        for index in range(len(connections))
    ]
    since = time.time()
    meter.start()
    with ThreadPoolExecutor(len(connections)) as senders:
        sent = sum(senders.map(send, connections, per_connection))
    meter.stop()
    # Checked after the clock stops: reading a 5,000-namespace answer is the client's time.
    failed = sum(
        1 for status, answer in answers if status != 200 or not json.loads(answer)["accepted"]
    )
    return Interval(
        kind=kind,
        meter=meter,
        latencies=latencies,
        rows_written=_rows_written_since(meter.database, since),
        failed=failed,
        request_bytes=sent,
        response_bytes=sum(len(answer) for _, answer in answers),
    )


def _rows_written_since(database: DatabaseCpu, since: float) -> int:
    # Every row a report inserts or rewrites carries the report's time.
    row = database.connection.execute(
        "SELECT count(*) FROM quota_usage WHERE written_at >= to_timestamp(%s)", (since - 1,)
    ).fetchone()
    return int(row[0]) if row else 0


def _broker_scale(
    args: argparse.Namespace, layout: Layout, workdir: Path, env: dict[str, str], token: str
) -> dict[str, Any]:
    server = serve_rgadmin(
        workdir,
        "broker-scale",
        {**env, "RG_REPORT_INTERVAL_SECONDS": str(BROKER_INTERVAL_S)},
        workers=args.broker_server_processes,
    )
    database = DatabaseCpu(env["RG_DATABASE_URL"])
    fleet = BrokerFleet(layout)
    intervals: list[Interval] = []
    # Each connection is kept for the run, as a broker keeps its own: behind several
    # server processes, a reporter's reports reach the process that answered its last.
    connections = [
        http.client.HTTPConnection(HOST, server.port, timeout=REPORT_TIMEOUT_S)
        for _ in range(args.broker_senders)
    ]
    order = _sending_order(fleet, len(connections))
    started = time.perf_counter()
    try:
        for kind in _interval_kinds(args):
            bodies = fleet.bodies(kind)
            meter = Meter(server, database)
            intervals.append(_broker_interval(meter, bodies, token, kind, connections, order))
            _progress(f"broker-scale {kind}: {intervals[-1].meter.wall:.2f} s")
        sampling = _history_sampling(server, started)
    finally:
        for connection in connections:
            connection.close()
        database.close()
        stop(server)
    return _broker_summary(args, layout, [interval.summary() for interval in intervals], sampling)


def _interval_kinds(args: argparse.Namespace) -> list[str]:
    """The broker intervals to run, in turn: the first, settling, steady, and, with
    ``--changed-interval``, the change and the settling after it."""
    kinds = ["first", *["settling"] * args.settle_intervals, *["steady"] * args.steady_intervals]
    if args.changed_interval:
        kinds += ["changed", *["settling after change"] * args.settle_intervals]
    return kinds


def _sending_order(fleet: BrokerFleet, senders: int) -> list[int]:
    """The order the reporters send in, every interval."""
    order = list(range(fleet.layout.reporters))
    if senders > 1:
        # Not in the order of the layout, whose neighbours share every namespace (and so
        # would wait on each other's locks throughout); the same each interval, so that
        # each broker reports an interval after its last, as it would on its own clock.
        fleet.random.shuffle(order)
    return order


def _broker_summary(
    args: argparse.Namespace,
    layout: Layout,
    summaries: list[dict[str, Any]],
    sampling: dict[str, Any],
) -> dict[str, Any]:
    """The intervals against the bar: the steady ones' median wall time, and every one's."""
    steady = [s for s in summaries if s["kind"] == "steady"]
    steady_wall = statistics.median(s["server_wall_seconds"] for s in steady) if steady else None
    bar = BROKER_BAR_FRACTION * BROKER_INTERVAL_S
    return {
        "model": _broker_model(args, layout),
        "bar_seconds": bar,
        "first_interval": summaries[0],
        "steady_interval_seconds": steady_wall,
        "steady_intervals": steady,
        "settling_intervals": [s for s in summaries if s["kind"].startswith("settling")],
        "changed_interval": next((s for s in summaries if s["kind"] == "changed"), None),
        "meets_bar": steady_wall is not None and steady_wall < bar,
        "every_interval_meets_bar": all(s["server_wall_seconds"] < bar for s in summaries),
        "history_sampling": sampling,
        "failed": sum(s["failed"] for s in summaries),
    }


def _broker_model(args: argparse.Namespace, layout: Layout) -> dict[str, Any]:
    """The broker shape as run: PIP-82's model at ``layout``'s size, and how it was sent."""
    return {
        "source": "PIP-82, resource consumption considerations",
        "reporters": layout.reporters,
        "namespaces_per_reporter": layout.per_reporter,
        "namespaces": layout.namespaces,
        "groups": layout.namespaces,
        "reporters_per_namespace": layout.spread,
        "reporters_per_group": layout.spread,
        "assignment": "namespace n is served by reporters spread*n .. spread*n+spread-1 "
        "(mod reporters), each namespace in a group of its own",
        "dimensions_limited": list(DIMENSIONS),
        "figures": f"publish demand 0.2-1.6 x an equal share of the quota; every figure "
        f"jitters by up to {STEADY_JITTER:.0%} each interval (steady), or all demands "
        f"grow {CHANGE:.0%} at once (changed)",
        "report_interval_seconds": BROKER_INTERVAL_S,
        "sending": "one interval's reports one after another on one keep-alive "
        "connection, sentAtMs = now"
        if args.broker_senders == 1
        else f"one interval's reports over {args.broker_senders} keep-alive connections "
        "at once (reporter r on connection r mod senders, in one shuffled order every "
        "interval), sentAtMs = now",
        "server_processes": args.broker_server_processes,
    }


# shape (b): Spark workers, open loop


@dataclass
class StepResult:
    rate: float
    seconds: float
    latencies: list[float] = field(default_factory=list)
    joins: list[float] = field(default_factory=list)
    """Latencies of the first reports of the workers new in the step (in its warm-up)."""
    settled_s: float | None = None
    """Workers following their answers: when the last answer of all but `UNSETTLED` of them
    held for the lease."""
    send_lags: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    not_accepted: int = 0
    connection_errors: int = 0
    timeouts: int = 0
    client_cpu_seconds: float = 0.0
    connections: int = 0

    @property
    def failed(self) -> int:
        unexpected = sum(count for status, count in self.statuses.items() if status != 200)
        return unexpected + self.not_accepted + self.connection_errors + self.timeouts

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99)

    @property
    def passed(self) -> bool:
        completed = len(self.latencies)
        # A server that completes noticeably fewer reports than were due is falling behind,
        # even if the ones it answered were quick.
        return (
            self.failed == 0
            and completed >= 0.95 * self.rate * self.seconds
            and self.p99 < P99_BAR_S
        )


@dataclass
class _Follow:
    """Workers that report when their answers ask: measured from ``measured_from`` (once
    every one's last answer held for the lease, ``lease_ms``) until ``until``."""

    lease_ms: int
    unsettled: set[int]
    """Workers whose last answer did not hold for the lease (all, before their first)."""
    measured_from: float = math.inf
    until: float = math.inf


@dataclass
class _Job:
    due: float
    reporter: int
    round: int  # the reporter's how-manieth report in the step
    measured: bool
    joins: bool = False  # the reporter's first report ever


class _SparkConnection(asyncio.Protocol):
    """One keep-alive connection: one report in flight, its answer's status and body read."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.expected = -1
        self.status = 0
        self.job: _Job | None = None
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's, so this is a cast, not a check.
        self.transport = cast(asyncio.Transport, transport)

    def send(self, job: _Job, request: bytes) -> None:
        assert self.transport is not None
        self.job = job
        self.sent_at = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.expected < 0:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            start = head.find(b"\r\ncontent-length:")
            if not head.startswith(b"http/1.1 ") or start < 0:
                self._broken()
                return
            end = head.find(b"\r\n", start + 2)
            try:
                self.status = int(head[9:12])
                length = int(head[start + 17 : end if end >= 0 else None])
            except ValueError:
                self._broken()
                return
            self.expected = head_end + 4 + length
        if len(self.buffer) < self.expected:
            return
        body = self.buffer[self.buffer.find(b"\r\n\r\n") + 4 : self.expected]
        self.buffer = b""
        self.expected = -1
        job, self.job = self.job, None
        assert job is not None
        self.pool.completed(self, job, self.status, body)

    def _broken(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)


class _Pool:
    """A keep-alive connection per worker, as each rgspark worker process holds one (so its
    reports reach one server process); a worker's report due while its last is in flight
    waits for it."""

    def __init__(
        self,
        port: int,
        step: StepResult,
        requests: list[list[tuple[bytes, bytes]]],
        follow: _Follow | None = None,
    ) -> None:
        self.port = port
        self.step = step
        self.requests = requests
        self.follow = follow
        self.connections: dict[int, _SparkConnection] = {}
        self.waiting: dict[int, deque[_Job]] = {}
        """Per worker, its reports due while it had none open or one in flight."""
        self.in_flight: set[_SparkConnection] = set()
        self.open = 0
        self.scheduled = 0
        """Reports scheduled (when following the answers) and not yet due."""
        self.all_done: asyncio.Future[None] | None = None

    def schedule(self, job: _Job) -> None:
        """Submit ``job`` when it is due."""
        self.scheduled += 1
        delay = max(0.0, job.due - time.perf_counter())
        asyncio.get_running_loop().call_later(delay, self._due, job)

    def _due(self, job: _Job) -> None:
        self.scheduled -= 1
        if self.follow is not None:
            job.measured = self.follow.measured_from <= job.due < self.follow.until
        self.submit(job)

    def submit(self, job: _Job) -> None:
        connection = self.connections.get(job.reporter)
        if connection is not None and connection.job is None:
            self._send(connection, job)
            return
        self.waiting.setdefault(job.reporter, deque()).append(job)
        if connection is None and len(self.waiting[job.reporter]) == 1:
            asyncio.get_running_loop().create_task(self.connect(job.reporter))

    def _send(self, connection: _SparkConnection, job: _Job) -> None:
        versions = self.requests[job.reporter]
        prefix, suffix = versions[job.round % len(versions)]
        now = time.perf_counter()
        if job.measured:
            self.step.send_lags.append(now - job.due)
        self.in_flight.add(connection)
        connection.send(job, prefix + str(round(time.time() * 1000)).encode() + suffix)

    def _next(self, connection: _SparkConnection, reporter: int) -> None:
        waiting = self.waiting.get(reporter)
        if waiting:
            self._send(connection, waiting.popleft())
        else:
            self.waiting.pop(reporter, None)
            self._check_done()

    def completed(self, connection: _SparkConnection, job: _Job, status: int, body: bytes) -> None:
        now = time.perf_counter()
        self.in_flight.discard(connection)
        if job.joins:
            self.step.joins.append(now - job.due)
        if job.measured:
            step = self.step
            step.latencies.append(now - job.due)
            step.statuses[status] = step.statuses.get(status, 0) + 1
            if status == 200 and b'"accepted":true' not in body:
                step.not_accepted += 1
        if self.follow is not None:
            self._follow(self.follow, job, status, body, now)
        self._next(connection, job.reporter)

    def _follow(self, follow: _Follow, job: _Job, status: int, body: bytes, now: float) -> None:
        """Schedule the worker's next report when its answer asks (``reportIntervalMs`` after
        this one was due, as rgspark waits that long from sending it; at once if that has
        passed), or an interval on after a failure, as rgspark backs off."""
        if status == 200:
            answer = json.loads(body)
            due = max(job.due + answer["reportIntervalMs"] / 1000, now)
            if answer["leaseMs"] == follow.lease_ms:
                follow.unsettled.discard(job.reporter)
            else:
                follow.unsettled.add(job.reporter)
        else:
            due = now + SPARK_INTERVAL_S
            follow.unsettled.add(job.reporter)
        if due < follow.until:
            self.schedule(_Job(due, job.reporter, job.round + 1, measured=False))

    def _failed(self, job: _Job) -> None:
        """A report that got no answer (its connection lost, or none made): a connection
        error; a worker that follows its answers reports again after backing off, as
        rgspark does (else it would never report again, and be counted gone)."""
        if job.measured:
            self.step.connection_errors += 1
        if self.follow is not None:
            self._follow(self.follow, job, 0, b"", time.perf_counter())

    def lost(self, connection: _SparkConnection) -> None:
        self.open -= 1
        reporter = next((r for r, c in self.connections.items() if c is connection), None)
        if reporter is not None:
            del self.connections[reporter]
        if connection in self.in_flight:
            self.in_flight.discard(connection)
            job = connection.job
            if job is not None:
                self._failed(job)
        if reporter is not None and self.waiting.get(reporter):
            asyncio.get_running_loop().create_task(self.connect(reporter))
        self._check_done()

    async def connect(self, reporter: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: _SparkConnection(self), HOST, self.port
            )
        except OSError:
            for job in self.waiting.pop(reporter, ()):
                self._failed(job)
            self._check_done()
            return
        self.open += 1
        self.step.connections = max(self.step.connections, self.open)
        self.connections[reporter] = connection
        self._next(connection, reporter)

    def _check_done(self) -> None:
        done = self.all_done
        idle = not self.in_flight and not self.waiting and not self.scheduled
        if done is not None and not done.done() and idle:
            done.set_result(None)

    def close(self) -> None:
        for connection in self.connections.values():
            if connection.transport is not None:
                connection.transport.abort()


def _spark_requests(
    reporters: int, groups: int, token: str, port: int, every_s: float
) -> list[list[tuple[bytes, bytes]]]:
    """Per reporter, a few versions of its whole HTTP request around ``sentAtMs`` (13 digits
    until 2286): its figures wander by less than 5% from one report to the next."""
    requests = []
    for reporter in range(reporters):
        group = reporter % groups
        rng = random.Random(reporter)
        msgs = rng.uniform(50, 500)
        size = rng.uniform(0.2, 2.0) * BYTES_PER_MSG
        steady = (msgs, msgs * size, msgs, msgs * size)
        versions = []
        for _ in range(SPARK_VERSIONS):
            dims = []
            for name, rate in zip(DIMENSIONS, steady, strict=True):
                rate *= 1 + rng.uniform(-STEADY_JITTER, STEADY_JITTER)
                dims.append(f'"{name}":{{"used":{round(rate * every_s)},"demand":{rate:.3f}}}')
            suffix = (
                f',"intervalMs":{round(every_s * 1000)},'
                f'"namespaces":{{"spark/job-{group}":{{{",".join(dims)}}}}}}}'
            ).encode()
            prefix = b'{"sentAtMs":'
            length = len(prefix) + 13 + len(suffix)
            head = (
                f"POST /quota/v1/reporters/spark-{reporter:05d}/reports HTTP/1.1\r\n"
                f"Host: {HOST}:{port}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            ).encode()
            versions.append((head + prefix, suffix))
        requests.append(versions)
    return requests


async def _spark_step(
    port: int,
    token: str,
    groups: int,
    rate: float,
    every_s: float,
    warmup: float,
    seconds: float,
    follow: bool,
    join_s: float | None = None,
) -> StepResult:
    """Offer ``rate`` reports per second, each worker's every ``every_s``, for ``warmup +
    seconds``; measure the last ``seconds``, and each worker's first report (joining).

    With ``follow``, the workers join as before (spread over ``every_s``, or over
    ``join_s``), and then each reports when its answers ask (`_Pool._follow`): every
    ``every_s`` once steady on its lease, sooner while it settles. The warm-up then ends
    as soon as the last answer of every worker but `UNSETTLED` of them held for the lease
    (``warmup`` at most; not before the last worker joined, nor before ``every_s``), and
    `StepResult.settled_s` says when that was.
    """
    reporters = max(1, round(rate * every_s))
    step = StepResult(rate=rate, seconds=seconds)
    total = warmup + seconds
    start = time.perf_counter() + 0.05
    following = _Follow(round(every_s * 1000), set(range(reporters))) if follow else None
    pool = _Pool(port, step, _spark_requests(reporters, groups, token, port, every_s), following)
    cpu_start = time.process_time()
    if following is not None:
        joined_s = every_s if join_s is None else join_s
        for reporter in range(reporters):
            due = start + joined_s * reporter / reporters
            pool.schedule(_Job(due, reporter, 0, False, joins=True))
        now = await _settle(following, step, reporters, start, max(every_s, joined_s), warmup)
        following.measured_from, following.until = now, now + seconds
        await asyncio.sleep(seconds)
    else:
        await _offer(pool, rate, reporters, start, warmup, total)
    await _answered(pool)
    step.client_cpu_seconds = time.process_time() - cpu_start
    step.timeouts += _unanswered(pool)
    pool.close()
    step.latencies.sort()
    step.send_lags.sort()
    return step


async def _settle(
    following: _Follow,
    step: StepResult,
    reporters: int,
    start: float,
    earliest_s: float,
    warmup: float,
) -> float:
    """The warm-up of workers that follow their answers: until the last answer of all but
    `UNSETTLED` of them held for the lease, not before ``earliest_s`` from ``start`` nor
    after ``warmup``. Returns when it ended; `StepResult.settled_s` is set if they settled."""
    while (now := time.perf_counter()) < start + warmup:
        settling = len(following.unsettled) > UNSETTLED * reporters
        if now >= start + earliest_s and not settling:
            step.settled_s = now - start
            break
        await asyncio.sleep(SETTLED_LOOK_S)
    return now


async def _offer(
    pool: _Pool, rate: float, reporters: int, start: float, warmup: float, total: float
) -> None:
    """Open loop: a report every ``1 / rate`` seconds from ``start`` for ``total`` seconds,
    the workers in turn; those due after ``warmup`` are measured."""
    for index in range(int(total * rate)):
        due = start + index / rate
        delay = due - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        reporter, round_ = index % reporters, index // reporters
        measured, joins = index / rate >= warmup, round_ == 0
        pool.submit(_Job(due, reporter, round_, measured, joins))


async def _answered(pool: _Pool) -> None:
    """Wait until every report submitted or scheduled has its answer, `GRACE_S` at most."""
    pool.all_done = asyncio.get_running_loop().create_future()
    pool._check_done()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(pool.all_done), GRACE_S)


def _unanswered(pool: _Pool) -> int:
    """Measured reports still in flight or waiting to be sent: timeouts."""
    return sum(1 for c in pool.in_flight if c.job is not None and c.job.measured) + sum(
        1 for jobs in pool.waiting.values() for job in jobs if job.measured
    )


def _step_summary(step: StepResult, meter: Meter, every_s: float) -> dict[str, Any]:
    lat = step.latencies
    wall = meter.wall or 1.0
    joins = sorted(step.joins)
    return {
        "offered_per_second": round(step.rate, 1),
        "reporters": max(1, round(step.rate * every_s)),
        # Workers new in the step, all starting within one report's period: how long the
        # last of them waited for its first answer (in the warm-up, not in the pass).
        "joined": len(joins),
        "joins_p50_ms": round(percentile(joins, 0.50) * 1000, 1),
        "joins_max_ms": round(joins[-1] * 1000, 1) if joins else None,
        # Workers following their answers: seconds from the first join until the last answer
        # of all but 1% held for the lease (null: not within the warm-up, or not following).
        "settled_s": _round(step.settled_s, 1),
        "completed_per_second": round(len(lat) / step.seconds, 1),
        "p50_ms": round(percentile(lat, 0.50) * 1000, 1),
        "p90_ms": round(percentile(lat, 0.90) * 1000, 1),
        "p99_ms": round(percentile(lat, 0.99) * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1) if lat else None,
        "failed": step.failed,
        "failures": {
            **{f"status_{code}": n for code, n in sorted(step.statuses.items()) if code != 200},
            "not_accepted": step.not_accepted,
            "connection_errors": step.connection_errors,
            "timeouts": step.timeouts,
        },
        "passed": step.passed,
        "connections": step.connections,
        # Near 1.0: the server process was saturated.
        "server_cpu_per_second": _round(
            None if meter.server_cpu is None else meter.server_cpu / wall
        ),
        "database_cpu_per_second": round(meter.database_cpu / wall, 3),
        # Well below 1.0 and a small send lag: the client kept to its schedule.
        "client_cpu_per_second": round(step.client_cpu_seconds / wall, 3),
        "send_lag_p99_ms": round(percentile(step.send_lags, 0.99) * 1000, 1),
    }


def _spark(
    args: argparse.Namespace, workdir: Path, env: dict[str, str], token: str, processes: int
) -> dict[str, Any]:
    database = DatabaseCpu(env["RG_DATABASE_URL"])
    shape = _SparkSteps(args, workdir, env, token, processes, database)
    started = time.perf_counter()
    try:
        best = _highest_passing(shape.passes, args.spark_start, args.spark_max, args.spark_refine)
    finally:
        database.close()
    wall = time.perf_counter() - started
    sampling = {
        "samples": shape.samples,
        "seconds": _round(shape.sampled_s),
        "share_of_run_wall": _round(shape.sampled_s / wall, 4),
    }
    return {
        "model": _spark_model(args, processes, shape.follow),
        "p99_bar_ms": P99_BAR_S * 1000,
        "sustained_reports_per_second": None if best is None else round(best, 1),
        "worker_processes_per_server": None if best is None else round(best * args.spark_every),
        "steps": shape.steps,
        "history_sampling": sampling,
        "failed": sum(step["failed"] for step in shape.steps),
    }


@dataclass
class _SparkSteps:
    """The spark shape's steps against ``processes`` server processes, one after another:
    each step's summary, and the history sampler's samples and seconds over every step's
    server."""

    args: argparse.Namespace
    workdir: Path
    env: dict[str, str]
    token: str
    processes: int
    database: DatabaseCpu
    steps: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0
    sampled_s: float = 0.0

    @property
    def follow(self) -> bool:
        # Workers reporting less often than the interval are steady ones on their leases: the
        # server gives leases that long, and they report when their answers ask, as rgspark
        # does.
        return bool(self.args.spark_every > SPARK_INTERVAL_S)

    def passes(self, rate: float) -> bool:
        """Run a step at ``rate``: whether it held the bar (`StepResult.passed`)."""
        args, every_s, follow = self.args, self.args.spark_every, self.follow
        # Each step on a server of its own, its tables emptied: a fleet of its own, every
        # worker joining, so that no step is measured in the wake of the one before (whose
        # workers, gone, would have every worker of the group plan it again meanwhile).
        _empty_usage(self.env["RG_DATABASE_URL"])
        server = serve_rgadmin(
            self.workdir,
            f"spark-{self.processes}",
            {
                **self.env,
                "RG_REPORT_INTERVAL_SECONDS": str(SPARK_INTERVAL_S),
                **({"RG_REPORT_LEASE_SECONDS": str(every_s)} if follow else {}),
            },
            workers=self.processes,
        )
        started = time.perf_counter()
        try:
            meter = Meter(server, self.database)
            meter.start()
            step = _run_loop(
                lambda: _spark_step(
                    server.port,
                    self.token,
                    args.spark_groups,
                    rate,
                    every_s,
                    args.spark_warmup,
                    args.spark_seconds,
                    follow,
                    args.spark_join_seconds,
                )
            )
            meter.stop()
            sampled = _history_sampling(server, started)
            self.samples += sampled["samples"]
            self.sampled_s += sampled["seconds"] or 0.0
        finally:
            stop(server)
        self.steps.append(_step_summary(step, meter, every_s))
        _progress(
            f"spark {rate:.0f}/s: p99 {self.steps[-1]['p99_ms']} ms, failed {step.failed}, "
            f"{'pass' if step.passed else 'fail'}"
        )
        return step.passed


def _highest_passing(
    passes: Callable[[float], bool], start: float, most: float, refine: int
) -> float | None:
    """The highest rate that passes: doubling from ``start`` (up to ``most``) until one
    fails, then ``refine`` bisections between the last that passed and the first that did
    not. None if none passed."""
    best: float | None = None
    rate = float(start)
    worst: float | None = None
    while rate <= most:
        if passes(rate):
            best = rate
            rate *= 2
        else:
            worst = rate
            break
    # Bisect between the last rate that held and the first that did not.
    low = best if best is not None else 0.0
    for _ in range(refine if worst is not None else 0):
        assert worst is not None
        middle = (low + worst) / 2
        if middle - low < max(1.0, 0.05 * low):
            break
        if passes(middle):
            low = best = middle
        else:
            worst = middle
    return best


def _spark_model(args: argparse.Namespace, processes: int, follow: bool) -> dict[str, Any]:
    """The spark shape as run: its workers, their figures, and how the load was offered."""
    return {
        "server_processes": processes,
        "groups": args.spark_groups,
        "namespaces": args.spark_groups,
        "namespaces_per_reporter": 1,
        "dimensions_limited": list(DIMENSIONS),
        "figures": f"50-500 msgs/s per worker, far over the quota; every figure jitters by "
        f"up to {STEADY_JITTER:.0%} from one report to the next",
        "report_interval_seconds": SPARK_INTERVAL_S,
        "report_every_seconds": args.spark_every,
        "load": "open loop: a fixed rate of reports spread evenly over each second, each "
        "reporter reporting every report_every_seconds on a keep-alive connection of its "
        "own, reporters spread round-robin over the groups; latency from when each report "
        "was due",
        "warmup_seconds_per_step": args.spark_warmup,
        "measured_seconds_per_step": args.spark_seconds,
        # The workers of a step start evenly over this (with --spark-every over 1).
        "join_seconds": args.spark_join_seconds if follow else None,
    }


def _scaling(by_processes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """With several ``--spark-server-processes``, each run, and each one's sustained rate
    over the first's (two processes against one: the bar is 1.7)."""
    if len(by_processes) < 2:
        return {}
    counts = list(by_processes)
    first = by_processes[counts[0]]["sustained_reports_per_second"]
    return {
        "spark_by_server_processes": {str(n): by_processes[n] for n in counts[1:]},
        "spark_scaling": {
            str(n): None
            if first is None or by_processes[n]["sustained_reports_per_second"] is None
            else round(by_processes[n]["sustained_reports_per_second"] / first, 2)
            for n in counts
        },
    }


# main


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        message = f"not a comma-separated list of counts: {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"counts must be distinct and 1 or more: {text!r}")
    return counts


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="A smaller model and shorter steps (under a minute)."
    )
    _add_broker_options(parser)
    parser.add_argument(
        "--shape",
        choices=("both", "broker", "spark"),
        default="both",
        help="Which shape to run (both).",
    )
    _add_spark_options(parser)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("RG_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="A PostgreSQL server and a database on it to connect to; the benchmark creates "
        "and drops a database of its own there.",
    )
    args = parser.parse_args(argv)
    _fill_in_sizes(args)
    _check_args(parser, args)
    return args


def _add_broker_options(parser: argparse.ArgumentParser) -> None:
    """The broker shape's model, its intervals, and how its reports are sent and served."""
    parser.add_argument("--reporters", type=int, help="Broker-scale reporters (100).")
    parser.add_argument(
        "--namespaces-per-reporter", type=int, help="Namespaces each broker reports (5000)."
    )
    parser.add_argument("--spread", type=int, default=5, help="Reporters per namespace.")
    parser.add_argument(
        "--settle-intervals",
        type=int,
        default=3,
        help="Intervals after the first while the allocations settle (reported, not steady).",
    )
    parser.add_argument(
        "--steady-intervals", type=int, default=5, help="Intervals after those, steady."
    )
    parser.add_argument(
        "--broker-senders",
        type=int,
        default=1,
        help="Connections the brokers' reports are sent over at once (1: one after another).",
    )
    parser.add_argument(
        "--broker-server-processes",
        type=int,
        default=1,
        help="rgadmin serve --workers for the broker shape (1).",
    )
    parser.add_argument(
        "--changed-interval",
        action="store_true",
        help="One more broker interval, every demand 10%% up, so every row is rewritten.",
    )


def _add_spark_options(parser: argparse.ArgumentParser) -> None:
    """The spark shape's workers, the rates its steps try, and the servers it runs on."""
    parser.add_argument("--spark-groups", type=int, default=1, help="Groups the workers share.")
    parser.add_argument("--spark-start", type=float, help="First rate, reports/s (50).")
    parser.add_argument("--spark-max", type=float, default=20_000, help="Highest rate tried.")
    parser.add_argument("--spark-refine", type=int, help="Bisection steps after doubling (3).")
    parser.add_argument("--spark-seconds", type=float, help="Measured seconds per step (4).")
    parser.add_argument(
        "--spark-warmup",
        type=float,
        help="Unmeasured seconds per step, while the step's new workers join and settle (20).",
    )
    parser.add_argument(
        "--spark-server-processes",
        type=_counts,
        default=[1],
        help="rgadmin serve --workers for the spark shape, or several, comma-separated (1,2), "
        "each run in turn and compared with the first.",
    )
    parser.add_argument(
        "--spark-every",
        type=float,
        default=SPARK_INTERVAL_S,
        help="Seconds between one worker's reports: 1, the interval (settling workers), or "
        "the lease (8: steady ones, each reporting when its answers ask). Workers held = the "
        "sustained rate times this.",
    )
    parser.add_argument(
        "--spark-join-seconds",
        type=float,
        help="With --spark-every over 1: the workers of a step start evenly over this many "
        "seconds (a fleet ramping up) rather than all within one lease.",
    )


def _fill_in_sizes(args: argparse.Namespace) -> None:
    """The sizes not given: ``--quick``'s, or the full run's (whose warm-up is longer for
    workers on leases, which settle before they are measured)."""
    defaults = (
        {
            "reporters": 20,
            "namespaces_per_reporter": 1000,
            "spark_start": 50,
            "spark_refine": 1,
            "spark_seconds": 2.0,
            "spark_warmup": 2.0,
        }
        if args.quick
        else {
            "reporters": 100,
            "namespaces_per_reporter": 5000,
            "spark_start": 50,
            "spark_refine": 3,
            "spark_seconds": 4.0,
            "spark_warmup": FOLLOW_WARMUP_S if args.spark_every > SPARK_INTERVAL_S else SETTLE_S,
        }
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.spread <= args.reporters:
        parser.error("--spread must be between 1 and --reporters")
    if args.reporters * args.namespaces_per_reporter % args.spread:
        parser.error("--reporters x --namespaces-per-reporter must be a multiple of --spread")
    if args.broker_senders < 1 or args.broker_server_processes < 1:
        parser.error("--broker-senders and --broker-server-processes must be 1 or more")
    if args.namespaces_per_reporter < 1 or args.spark_groups < 1:
        parser.error("--namespaces-per-reporter and --spark-groups must be 1 or more")
    if args.steady_intervals < 0 or args.settle_intervals < 0:
        parser.error("--settle-intervals and --steady-intervals must be 0 or more")
    if args.spark_join_seconds is not None and args.spark_join_seconds <= 0:
        parser.error("--spark-join-seconds must be positive")
    if args.spark_start <= 0 or args.spark_seconds <= 0 or args.spark_warmup < 0:
        parser.error("--spark-start and --spark-seconds must be positive")
    if args.spark_every <= 0:
        parser.error("--spark-every must be positive")


def _terminate(signum: int, _frame: object) -> None:
    # Turn SIGTERM into an exception, so the servers are stopped and the database dropped.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    layout = Layout(args.reporters, args.namespaces_per_reporter, args.spread)
    key = generate_secret_key()
    token = create_token(subject=SUPERUSER, secret_key=key)
    workdir = Path(tempfile.mkdtemp(prefix="rg-usage-ingest-"))
    started = time.perf_counter()
    try:
        with _database(args.postgres_url) as database_url:
            env = server_env(database_url, key, SUPERUSER)
            _migrate(database_url, env, workdir)
            setup_started = time.perf_counter()
            _populate(database_url, layout, args.spark_groups)
            setup_s = time.perf_counter() - setup_started
            _progress(f"populated {layout.namespaces} namespaces in {setup_s:.1f} s")
            with psycopg.connect(database_url) as connection:
                row = connection.execute("SHOW server_version").fetchone()
                version = str(row[0]) if row else "?"
            broker = spark = None
            by_processes: dict[int, dict[str, Any]] = {}
            # After each shape, the store as it left it: what the quota bound rests on holds.
            if args.shape in ("both", "broker"):
                broker = _broker_scale(args, layout, workdir, env, token)
                broker["store_check"] = store_check(workdir, env)
            if args.shape in ("both", "spark"):
                for processes in args.spark_server_processes:
                    _empty_usage(database_url)
                    by_processes[processes] = _spark(args, workdir, env, token, processes)
                    by_processes[processes]["store_check"] = store_check(workdir, env)
                spark = by_processes[args.spark_server_processes[0]]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "usage_ingest",
        "endpoint": "POST /quota/v1/reporters/{reporterId}/reports (superuser token)",
        "server": "rgadmin serve --workers 1 --no-access-log (spark: --spark-server-processes)",
        "database": f"PostgreSQL {version}",
        "broker_scale": broker,
        "spark": spark,
        **_scaling(by_processes),
        "failed": sum(
            shape["failed"] + (not shape["store_check"]["ok"])
            for shape in (broker, *by_processes.values())
            if shape
        ),
        "config": {
            "quick": args.quick,
            "setup_seconds": round(setup_s, 1),
            "total_seconds": round(time.perf_counter() - started, 1),
            "group_rates": GROUP_RATES,
            "client": f"http.client (broker scale), {event_loop_name()} protocols (spark)",
            "cpus": os.cpu_count(),
            "load_average_at_end": [round(value, 2) for value in os.getloadavg()],
        },
    }
    print(json.dumps(report, indent=2))
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
