"""How close does our server come to a bare FastAPI endpoint on its hottest read, and how
close does it come on PostgreSQL to itself on SQLite, for that read and for admin writes?

    python -m benchmarks.api_throughput [--seconds 4] [--rounds 5] [--concurrency 32]
                                        [--workers 1] [--warmup 1] [--no-pin]
                                        [--postgres-url postgresql://postgres@127.0.0.1:5432/test]

prints one JSON object with three comparisons, each the ratio of the medians of requests per
second over rounds:

- ``ratio``: ``GET /admin/v2/resourcegroups/{rg}`` on our server (SQLite) against a bare
  endpoint (bar 0.7);
- ``postgresql_get.ratio``: the same GET on our server on PostgreSQL against on SQLite
  (bar 0.5);
- ``admin_writes.ratio``: ``PUT /admin/v2/resourcegroups/{rg}`` (an update; each connection
  its own group) on PostgreSQL against on SQLite (bar 0.5).

- ours: ``rgadmin serve --no-access-log`` as the README runs it, in a fresh temporary
  directory, so it generates its own ``data/secret.key`` and SQLite ``data/resourcegroups.db``.
  The group is created with a PUT and read with a superuser token from
  ``rgadmin tokens create --subject admin``, run in that directory.
- ours on PostgreSQL: the same, in another fresh directory, with ``RG_DATABASE_URL`` naming a
  database made for the run on the server ``--postgres-url`` names (migrated with
  ``rgadmin migrate``, dropped afterwards). PostgreSQL itself is not pinned and its CPU time
  is not in the server's.
- bare: ``bare_app`` below, an ``async`` endpoint on the same path returning a constant with
  the same JSON body, run by ``uvicorn`` with the same workers, loop, HTTP parser and logging.

All servers run for the whole benchmark and are measured in alternating rounds (bare, ours,
ours on PostgreSQL, bare, ...; writes: SQLite, PostgreSQL, ...) after a warm-up, so drifting
load on a shared machine hits all alike; the figures are medians over rounds. Each side gets
the very same request bytes, but for its own token.

On two cores the client can easily be what limits the rate, making every server look the
same. The client here (``benchmarks._http_load``) is raw keep-alive sockets with a prebuilt
request, and where the machine allows it the servers are pinned to one CPU and the client to
another, so neither steals the other's time; the JSON reports the client's and the servers'
CPU use per round, which shows who was saturated, and requests per server CPU second with
their ratio (``cpu_efficiency_ratio``), which other load on the machine disturbs less.

Any failed request (a status other than 200, or 204 for writes, a broken connection, no
answer within 5 s of the round's end) is counted per side and makes the exit status 1.
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from benchmarks._http_load import (
    LoadResult,
    build_get,
    build_request,
    event_loop_name,
    percentile,
    run_load,
)
from benchmarks._servers import (
    HOST,
    Server,
    clean_env,
    free_port,
    http_request,
    migrate_rgadmin,
    postgres_database,
    rgadmin,
    rgadmin_server,
    start,
    stop,
    wait_ready,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
GROUP = "bench-group"
GROUP_PATH = f"/admin/v2/resourcegroups/{GROUP}"
# Every field set, so the body read back is exactly this and the bare endpoint can return it.
GROUP_BODY = {
    "publishRateInMsgs": 2000,
    "publishRateInBytes": 10485760,
    "dispatchRateInMsgs": 1000,
    "dispatchRateInBytes": 5242880,
    "replicationDispatchRateInMsgs": -1,
    "replicationDispatchRateInBytes": -1,
}
BAR = 0.7
# The request-quota check must cost next to nothing: quotas configured (not exceeded) against
# none, on the same endpoint, for a role that quotas apply to.
QUOTA_BAR = 0.95
READER = "bench-reader"
QUOTA_PATH = f"/admin/v2/request-quotas/roles/{READER}"
# On PostgreSQL against SQLite, one server process each: the GET above, and admin writes.
POSTGRES_GET_BAR = 0.5
WRITE_BAR = 0.5
WRITE_PATH = "/admin/v2/resourcegroups/bench-write-{connection}"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

bare_app = FastAPI()


@bare_app.get("/admin/v2/resourcegroups/{rg}")
async def bare_get_resource_group(rg: str) -> dict[str, int]:
    return GROUP_BODY


@contextlib.contextmanager
def _affinity(cpus: set[int] | None) -> Iterator[None]:
    """Run the block on ``cpus``: processes started in it inherit them."""
    if cpus is None:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def _plan_cpus(pin: bool, workers: int) -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, client CPUs): the client gets one CPU, the servers up to ``workers``."""
    if not pin or not hasattr(os, "sched_setaffinity"):
        return None, None
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return None, None
    client = {available[-1]}
    server = set(available[: max(1, min(workers, len(available) - 1))])
    return server, client


# measuring


@dataclass
class Round:
    load: LoadResult
    wall_seconds: float
    server_cpu_seconds: float | None  # None where /proc is not available


def _side_summary(rounds: list[Round]) -> dict[str, Any]:
    results = [round_.load for round_ in rounds]
    latencies = sorted(value for result in results for value in result.latencies)
    rates = [result.requests_per_second for result in results]
    statuses: dict[str, int] = {}
    for result in results:
        for status, count in result.statuses.items():
            statuses[str(status)] = statuses.get(str(status), 0) + count
    # (requests, server CPU seconds) of the rounds where the server's CPU time is known
    cpu_rounds = [
        (r.load.completed, r.server_cpu_seconds, r.wall_seconds)
        for r in rounds
        if r.server_cpu_seconds
    ]
    return {
        "median_rps": round(statistics.median(rates), 1),
        "rps_per_round": [round(rate, 1) for rate in rates],
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "requests": sum(result.completed for result in results),
        "failed": sum(result.failed for result in results),
        "statuses": statuses,
        # Well below 1.0: the client was not what limited the rate.
        "client_cpu_per_round": [
            round(result.client_cpu_seconds / result.seconds, 3) for result in results
        ],
        # Well below 1.0 while the client idles too: something else on the machine had the CPU.
        "server_cpu_per_round": [round(cpu / wall, 3) for _, cpu, wall in cpu_rounds] or None,
        # Unlike requests/s, not lowered when other work on a shared machine takes the
        # server's CPU away, so it is the steadier figure on a noisy machine.
        "median_requests_per_server_cpu_second": (
            round(statistics.median(done / cpu for done, cpu, _ in cpu_rounds), 1)
            if cpu_rounds
            else None
        ),
    }


def _measure(
    server: Server,
    request: bytes | list[bytes],
    concurrency: int,
    seconds: float,
    expected_status: int = 200,
) -> Round:
    cpu_before = server.cpu_seconds()
    started = time.perf_counter()
    load = run_load(
        HOST,
        server.port,
        request,
        concurrency=concurrency,
        seconds=seconds,
        expected_status=expected_status,
    )
    wall = time.perf_counter() - started
    cpu_after = server.cpu_seconds()
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return Round(load, wall, cpu)


def _rounds(
    args: argparse.Namespace,
    order: Sequence[Server],
    requests: Mapping[str, bytes | list[bytes]],
    expected_status: int = 200,
) -> dict[str, list[Round]]:
    """Warm every server up, then measure them in alternating rounds, in ``order``."""
    if args.warmup > 0:
        for server in order:
            run_load(
                HOST,
                server.port,
                requests[server.name],
                concurrency=args.concurrency,
                seconds=args.warmup,
                expected_status=expected_status,
            )
    rounds: dict[str, list[Round]] = {server.name: [] for server in order}
    for _ in range(args.rounds):
        for server in order:
            rounds[server.name].append(
                _measure(
                    server, requests[server.name], args.concurrency, args.seconds, expected_status
                )
            )
    return rounds


def _compare(rounds: dict[str, list[Round]], side: str, against: str, bar: float) -> dict[str, Any]:
    """``side`` against ``against``: the ratio of their median rates, per round too."""
    summary = {name: _side_summary(rounds[name]) for name in (side, against)}
    base = summary[against]["median_rps"]
    ratio = summary[side]["median_rps"] / base if base > 0 else 0.0
    per_round = [
        a.load.requests_per_second / b.load.requests_per_second
        for a, b in zip(rounds[side], rounds[against], strict=True)
        if b.load.requests_per_second > 0
    ]
    efficiency = (
        summary[side]["median_requests_per_server_cpu_second"],
        summary[against]["median_requests_per_server_cpu_second"],
    )
    return {
        "ratio": round(ratio, 3),
        "ratio_per_round": [round(value, 3) for value in per_round],
        "cpu_efficiency_ratio": (
            round(efficiency[0] / efficiency[1], 3) if efficiency[0] and efficiency[1] else None
        ),
        "bar": bar,
        "meets_bar": ratio >= bar,
        "summaries": summary,
    }


def _versions() -> dict[str, str]:
    names = ("fastapi", "starlette", "uvicorn", "pydantic", "sqlalchemy", "uvloop", "httptools")
    found: dict[str, str] = {"python": platform.python_version()}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def _uvicorn_http() -> str:
    # What uvicorn's "auto" settings pick in this interpreter, which both servers run on.
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="Length of each round.")
    parser.add_argument("--rounds", type=int, default=5, help="Rounds per server.")
    parser.add_argument("--concurrency", type=int, default=32, help="Keep-alive connections.")
    parser.add_argument("--workers", type=int, default=1, help="Worker processes per server.")
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="Unmeasured seconds per server first."
    )
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="Do not pin servers and client."
    )
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES_URL,
        help="The PostgreSQL server to make the run's database on (dropped afterwards).",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.concurrency < 1 or args.workers < 1:
        parser.error("--seconds must be positive; --rounds, --concurrency, --workers >= 1")
    return args


def _terminate(signum: int, _frame: object) -> None:
    # Turn SIGTERM into an exception, so the servers are stopped on the way out.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    server_cpus, client_cpus = _plan_cpus(args.pin, args.workers)
    workdir = Path(tempfile.mkdtemp(prefix="rg-api-throughput-"))
    env = clean_env()
    workers = ["--workers", str(args.workers)]
    ours = rgadmin_server(workdir / "sqlite", "ours", args.workers)
    postgres = rgadmin_server(workdir / "postgresql", "postgresql", args.workers)
    bare_port = free_port()
    # The same settings `rgadmin serve` hands uvicorn.run: log level, proxy headers, no access log.
    bare = Server(
        name="bare",
        command=[
            *(sys.executable, "-m", "uvicorn", "benchmarks.api_throughput:bare_app"),
            *("--host", HOST, "--port", str(bare_port), *workers),
            *("--no-access-log", "--no-proxy-headers", "--log-level", "info"),
        ],
        cwd=REPO_ROOT,
        port=bare_port,
        ready_path=GROUP_PATH,
        log=workdir / "bare.log",
    )
    servers = (bare, ours, postgres)
    try:
        with postgres_database(args.postgres_url, "rg_api_throughput") as (url, version):
            postgres_env = {**env, "RG_DATABASE_URL": url}
            migrate_rgadmin(postgres.cwd, postgres_env)
            try:
                with _affinity(server_cpus):
                    start(ours, env)
                    start(postgres, postgres_env)
                    start(bare, env)
                if client_cpus is not None:
                    os.sched_setaffinity(0, client_cpus)
                for server in servers:
                    wait_ready(server)
                report = _benchmark(args, ours, postgres, bare, env)
            finally:
                for server in servers:
                    stop(server)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["postgresql_get"]["postgresql"]["database"] = f"postgresql {version}"
    report["config"]["cpu_pinning"] = (
        {"server_cpus": sorted(server_cpus), "client_cpus": sorted(client_cpus or ())}
        if server_cpus is not None
        else "off"
    )
    print(json.dumps(report, indent=2))
    sides = (
        report["ours"],
        report["bare"],
        report["postgresql_get"]["postgresql"],
        *report["admin_writes"]["summaries"].values(),
    )
    return 0 if all(side["failed"] == 0 for side in sides) else 1


def _benchmark(
    args: argparse.Namespace, ours: Server, postgres: Server, bare: Server, env: dict[str, str]
) -> dict[str, Any]:
    auth = {server.name: _bearer(server, env, "admin") for server in (ours, postgres)}
    auth[bare.name] = auth[ours.name]
    _create_group((ours, postgres), auth)
    order = (bare, ours, postgres)
    bodies = _same_answers(order, auth)
    requests = {
        server.name: build_get(HOST, server.port, GROUP_PATH, auth[server.name]) for server in order
    }
    rounds = _rounds(args, order, requests)

    against_bare = _compare(rounds, "ours", "bare", BAR)
    summary = against_bare.pop("summaries")
    postgresql_get = _compare(rounds, "postgresql", "ours", POSTGRES_GET_BAR)
    postgresql_get["postgresql"] = postgresql_get.pop("summaries")["postgresql"]
    quota_check = _quota_check_cost(args, ours, auth[ours.name], env)
    writes = _write_throughput(args, ours, postgres, auth)
    return {
        "benchmark": "api_throughput",
        "endpoint": f"GET /admin/v2/resourcegroups/{{rg}} (superuser token, rg={GROUP})",
        **against_bare,
        "postgresql_get": {
            "endpoint": "the same GET, on PostgreSQL (ratio) against on SQLite (ours)",
            **postgresql_get,
        },
        "admin_writes": writes,
        "request_quota_check": quota_check,
        "ours": {
            "server": " ".join(["rgadmin", *ours.command[len(rgadmin()) :]]),
            "database": "sqlite:///data/resourcegroups.db (default, fresh temporary directory)",
            **summary["ours"],
        },
        "bare": {
            "server": "uvicorn " + " ".join(bare.command[3:]),
            "endpoint": "async def, str path parameter, returns a constant dict[str, int]",
            **summary["bare"],
        },
        "config": _config(args, bodies),
    }


def _create_group(servers: Sequence[Server], auth: dict[str, dict[str, str]]) -> None:
    """The group the GET reads, created on each of ours with every field set."""
    for server in servers:
        status, body = http_request(
            server.port,
            "PUT",
            GROUP_PATH,
            headers={**auth[server.name], "Content-Type": "application/json"},
            body=json.dumps(GROUP_BODY).encode(),
        )
        if status != 204:
            raise RuntimeError(f"{server.name}: PUT {GROUP_PATH} answered {status}: {body!r}")


def _same_answers(servers: Sequence[Server], auth: dict[str, dict[str, str]]) -> dict[str, bytes]:
    """Each server's answer to the GET, by name; all must be the group as created, or the
    comparison is not like for like."""
    bodies = {}
    for server in servers:
        status, body = http_request(server.port, "GET", GROUP_PATH, headers=auth[server.name])
        if status != 200 or json.loads(body) != GROUP_BODY:
            raise RuntimeError(f"{server.name}: GET {GROUP_PATH} answered {status}: {body!r}")
        bodies[server.name] = body
    return bodies


def _config(args: argparse.Namespace, bodies: dict[str, bytes]) -> dict[str, Any]:
    """The run's settings, the answers' sizes, and the software and machine it ran on."""
    return {
        "concurrency": args.concurrency,
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "warmup_seconds_per_server": args.warmup,
        "workers": args.workers,
        "order": "alternating rounds: bare, ours, ours on PostgreSQL, bare, ...",
        "response_bytes": {name: len(body) for name, body in bodies.items()},
        "uvicorn_loop": event_loop_name(),
        "uvicorn_http": _uvicorn_http(),
        "load_generator": (
            f"benchmarks._http_load: {event_loop_name()} protocols, HTTP/1.1 keep-alive, "
            "one request in flight per connection"
        ),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(value, 2) for value in os.getloadavg()],
        "versions": _versions(),
    }


def _write_throughput(
    args: argparse.Namespace, ours: Server, postgres: Server, auth: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """Admin writes, SQLite and PostgreSQL alternating: each connection updates a group of
    its own (created by the warm-up, or by the first round without one) with PUT."""
    body = json.dumps({"publishRateInMsgs": 1000, "dispatchRateInBytes": 2048}).encode()
    requests = {
        server.name: [
            build_request(
                HOST,
                server.port,
                "PUT",
                WRITE_PATH.format(connection=connection),
                {**auth[server.name], "Content-Type": "application/json"},
                body,
            )
            for connection in range(args.concurrency)
        ]
        for server in (ours, postgres)
    }
    rounds = _rounds(args, (ours, postgres), requests, expected_status=204)
    compared = _compare(rounds, "postgresql", "ours", WRITE_BAR)
    summaries = compared.pop("summaries")
    return {
        "endpoint": (
            "PUT /admin/v2/resourcegroups/{rg} (superuser token; one group per connection), "
            "on PostgreSQL (ratio) against on SQLite"
        ),
        **compared,
        "summaries": {"postgresql": summaries["postgresql"], "sqlite": summaries["ours"]},
    }


def _bearer(server: Server, env: dict[str, str], role: str) -> dict[str, str]:
    """Headers with a token for `role`, minted as a user would, by `rgadmin tokens create`."""
    token = subprocess.run(
        [*rgadmin(), "tokens", "create", "--subject", role],
        cwd=server.cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"Authorization": f"Bearer {token}"}


def _quota_check_cost(
    args: argparse.Namespace, ours: Server, auth: dict[str, str], env: dict[str, str]
) -> dict[str, Any]:
    """The same GET by a tenant admin (superusers are exempt from request quotas), with a
    request quota configured for it but far from exceeded, against none, alternating."""
    json_headers = {**auth, "Content-Type": "application/json"}
    setup = (
        ("PUT", "/admin/v2/tenants/bench", {"adminRoles": [READER]}),
        ("POST", f"/admin/v2/tenants/bench/resourcegroup/{GROUP}", None),
    )
    for method, path, payload in setup:
        body = None if payload is None else json.dumps(payload).encode()
        status, answer = http_request(ours.port, method, path, headers=json_headers, body=body)
        if status != 204:
            raise RuntimeError(f"{method} {path} answered {status}: {answer!r}")
    request = build_get(HOST, ours.port, GROUP_PATH, _bearer(ours, env, READER))
    quota = json.dumps({"requestsPerSecond": 1_000_000}).encode()
    rounds: dict[str, list[Round]] = {"none": [], "configured": []}
    for _ in range(args.rounds):
        for side in ("none", "configured"):
            if side == "configured":
                http_request(ours.port, "PUT", QUOTA_PATH, headers=json_headers, body=quota)
            else:
                http_request(ours.port, "DELETE", QUOTA_PATH, headers=auth)
            rounds[side].append(_measure(ours, request, args.concurrency, args.seconds))
    summary = {side: _side_summary(rounds[side]) for side in rounds}
    ratio = summary["configured"]["median_rps"] / summary["none"]["median_rps"]
    return {
        "endpoint": f"GET {GROUP_PATH} as tenant admin {READER}",
        "ratio": round(ratio, 3),
        "bar": QUOTA_BAR,
        "meets_bar": ratio >= QUOTA_BAR,
        "configured": {"quota": f"{READER}: 1000000 requests/s", **summary["configured"]},
        "none": summary["none"],
    }


if __name__ == "__main__":
    sys.exit(main())
