"""Does a report cost the same whatever the size of its group, on PostgreSQL?

    python -m benchmarks.group_size [--sizes 10,100,1000,5000] [--rate 100]
                                    [--min-reports 2000] [--postgres-url URL]

prints one JSON object: for each size ``n``, ``n`` workers (reporters of one namespace each,
as rgspark's Python workers are) share one group, on ``rgadmin serve --workers 1`` against a
PostgreSQL database created for the run and dropped afterwards. The report interval is the
one in which ``n`` workers at ``--rate`` reports a second fit (at least 1 s; 100/s is about
what one server process takes here), so that every worker reports about once an interval,
as in a real fleet of that size held by one process at capacity: the server's periodic work
(a group's summaries, expiry) then comes as often per report as it would there. Each size
runs five rounds in which every worker reports once, one report after another on one
keep-alive connection (sizes too small for 2,000 reports run them again with
new workers, the old ones released): the first (every worker joins, its demand unknown),
two while the allocations settle, one that moves every demand by 10% (every figure is
recorded anew), and one more to settle. Those are the rounds in which the allocator's inputs
change at every report; a steady round costs less.

The figure is the CPU a report costs, the server process's and PostgreSQL's together, at
each size, and ``flatness``: the most of those over the least (1.0 is perfectly flat; the
bar is 1.2). Sizes run one after another in one run, on one machine, so the ratio holds
however loaded the machine is.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from app.auth import create_token, generate_secret_key
from benchmarks._servers import HOST, serve_rgadmin, server_env, stop
from benchmarks.usage_ingest import (
    DEFAULT_POSTGRES_URL,
    SUPERUSER,
    DatabaseCpu,
    Layout,
    Meter,
    _database,
    _migrate,
    _populate,
    _post,
)
from rgspark.wire import DIMENSIONS, UNKNOWN_DEMAND

NAMESPACE = "spark/job-0"
ROUNDS = ("join", "settle", "settle", "change", "settle")
CHANGE = 1.10  # every demand 10% up: beyond the 5% under which figures are held
FLATNESS_BAR = 1.2
WARM_UP = 20  # workers whose reports warm the server up, apart


def _bodies(size: int, round_: int, interval_ms: int) -> list[bytes]:
    """Each worker's report for one round, without ``sentAtMs`` (added when sent)."""
    bodies = []
    for worker in range(size):
        rng = random.Random(worker * 31 + round_)
        msgs = random.Random(worker).uniform(50, 500) * (CHANGE if round_ >= 3 else 1.0)
        dims = []
        for name, rate in zip(DIMENSIONS, (msgs, msgs * 1024, msgs, msgs * 1024), strict=True):
            rate *= 1 + rng.uniform(-0.02, 0.02)
            demand = UNKNOWN_DEMAND if round_ == 0 else rate
            dims.append(f'"{name}":{{"used":{round(rate * interval_ms / 1000)},"demand":{demand}}}')
        body = f'"intervalMs":{interval_ms},"namespaces":{{"{NAMESPACE}":{{{",".join(dims)}}}}}}}'
        bodies.append(body.encode())
    return bodies


@dataclass
class _Sender:
    """Reports and releases on one keep-alive connection, and how many reports failed."""

    connection: http.client.HTTPConnection
    headers: dict[str, str]
    failed: int = 0

    def report(self, reporter: str, body: bytes) -> None:
        sent = b'{"sentAtMs":%d,' % round(time.time() * 1000) + body
        path = f"/quota/v1/reporters/{reporter}/reports"
        status, answer = _post(self.connection, path, sent, self.headers)
        self.failed += status != 200 or not json.loads(answer)["accepted"]

    def release(self, reporter: str) -> None:
        self.connection.request("DELETE", f"/quota/v1/reporters/{reporter}", headers=self.headers)
        self.connection.getresponse().read()


@dataclass
class _Spent:
    """What one cycle of rounds took: wall, server CPU and database CPU seconds."""

    wall: float
    server_cpu: float
    database_cpu: float


def _size(
    size: int, rate: float, min_reports: int, workdir: Path, env: dict[str, str], token: str
) -> dict[str, Any]:
    """A group of ``size`` workers on a server of its own: what a report costs it."""
    interval_s = max(1.0, size / rate)
    server = serve_rgadmin(
        workdir, f"size-{size}", {**env, "RG_REPORT_INTERVAL_SECONDS": str(interval_s)}
    )
    database = DatabaseCpu(env["RG_DATABASE_URL"])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sender = _Sender(http.client.HTTPConnection(HOST, server.port, timeout=60), headers)
    rounds = [_bodies(size, index, round(interval_s * 1000)) for index in range(len(ROUNDS))]
    meter = Meter(server, database)
    # Small groups run their rounds again, with new workers, until they have made
    # ``min_reports``: a figure of a few dozen reports would be noise.
    cycles = max(1, -(-min_reports // (size * len(ROUNDS))))
    try:
        _warm_up(sender)
        spent = [_cycle(sender, meter, rounds, f"w{size}-{cycle}") for cycle in range(cycles)]
    finally:
        sender.connection.close()
        database.close()
        stop(server)
    return _per_report(size, interval_s, size * len(ROUNDS) * cycles, spent, sender.failed)


def _warm_up(sender: _Sender) -> None:
    """Reports in another group, released before the clock starts: the first reports of a
    process compile its statements and fill its caches."""
    for bodies in _bodies(WARM_UP, 0, 1000), _bodies(WARM_UP, 1, 1000):
        for worker, body in enumerate(bodies):
            sender.report(f"warm-{worker}", body.replace(b"job-0", b"job-1"))
    for worker in range(WARM_UP):
        sender.release(f"warm-{worker}")


def _cycle(sender: _Sender, meter: Meter, rounds: list[list[bytes]], prefix: str) -> _Spent:
    """Every round, each worker (``prefix``-numbered) reporting once, timed; then every
    worker released, untimed."""
    meter.start()
    for bodies in rounds:
        for worker, body in enumerate(bodies):
            sender.report(f"{prefix}-{worker:05d}", body)
    meter.stop()
    spent = _Spent(meter.wall, meter.server_cpu or 0.0, meter.database_cpu)
    for worker in range(len(rounds[0])):
        sender.release(f"{prefix}-{worker:05d}")
    return spent


def _per_report(
    size: int, interval_s: float, reports: int, spent: list[_Spent], failed: int
) -> dict[str, Any]:
    """The cycles' seconds, summed in the order they ran, in milliseconds per report."""
    wall = server_cpu = database_cpu = 0.0
    for cycle in spent:
        wall += cycle.wall
        server_cpu += cycle.server_cpu
        database_cpu += cycle.database_cpu
    return {
        "workers": size,
        "report_interval_seconds": interval_s,
        "reports": reports,
        "server_cpu_ms_per_report": round(server_cpu / reports * 1000, 3),
        "database_cpu_ms_per_report": round(database_cpu / reports * 1000, 3),
        "cpu_ms_per_report": round((server_cpu + database_cpu) / reports * 1000, 3),
        "wall_ms_per_report": round(wall / reports * 1000, 3),
        "failed": failed,
    }


def _empty(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("TRUNCATE quota_usage, quota_reporters, quota_groups")
        connection.execute("VACUUM ANALYZE")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,5000", help="Workers per group, in turn.")
    parser.add_argument(
        "--rate", type=float, default=100.0, help="Reports a second the interval is sized for."
    )
    parser.add_argument(
        "--min-reports", type=int, default=2000, help="Reports measured per size, at least."
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    key = generate_secret_key()
    token = create_token(subject=SUPERUSER, secret_key=key)
    workdir = Path(tempfile.mkdtemp(prefix="rg-group-size-"))
    results = []
    try:
        with _database(args.postgres_url) as database_url:
            env = server_env(database_url, key, SUPERUSER)
            _migrate(database_url, env, workdir)
            _populate(database_url, Layout(1, 1, 1), spark_groups=2)
            for size in sizes:
                _empty(database_url)
                results.append(_size(size, args.rate, args.min_reports, workdir, env, token))
                print(f"{size} workers: {results[-1]['cpu_ms_per_report']} ms", file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    costs = [result["cpu_ms_per_report"] for result in results]
    flatness = max(costs) / min(costs) if costs and min(costs) > 0 else None
    report = {
        "benchmark": "group_size",
        "endpoint": "POST /quota/v1/reporters/{reporterId}/reports (superuser token)",
        "rounds": list(ROUNDS),
        "sizes": results,
        "flatness": None if flatness is None else round(flatness, 3),
        "flatness_bar": FLATNESS_BAR,
        "failed": sum(result["failed"] for result in results),
    }
    print(json.dumps(report, indent=2))
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
